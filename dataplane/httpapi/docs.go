package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/bloomery/bloomery/dataplane/apidocs"
)

// The documentation routes exist only with -d (Config.DocsEnabled).

// docsRedirect sends /v1/docs to /v1/docs/, where the page's relative link to openapi.json works.
func (s *Server) docsRedirect(c echo.Context) error {
	return c.Redirect(http.StatusMovedPermanently, c.Path()+"/")
}

func (s *Server) docs(c echo.Context) error {
	return c.Blob(http.StatusOK, echo.MIMETextHTMLCharsetUTF8, s.docsPage)
}

func (s *Server) openAPI(c echo.Context) error {
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, apidocs.OpenAPI())
}
