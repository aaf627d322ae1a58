// Package apidocs is the data plane's API documentation: an OpenAPI 3 document of every endpoint
// and a page that lists them and sends requests. Both are embedded in the binary, and the page
// fetches nothing from anywhere else, so it works where the cluster cannot reach the internet.
package apidocs

import (
	"bytes"
	_ "embed" // go:embed
	"encoding/json"
	"fmt"
)

// openAPI is written by hand: the server's tests check that it names exactly the routes the server
// registers, and a hand-written description reads better than one generated from code.
//
//go:embed openapi.json
var openAPI []byte

//go:embed page.html
var pageTemplate []byte

// placeholder is where the page takes the document, inside a <script type="application/json">.
const placeholder = "/*OPENAPI*/"

// OpenAPI is the OpenAPI 3 document, as JSON.
func OpenAPI() []byte { return openAPI }

// Page is the HTML page, with the document inlined so that it renders without a second request.
func Page() ([]byte, error) {
	var compact bytes.Buffer
	if err := json.Compact(&compact, openAPI); err != nil {
		return nil, fmt.Errorf("openapi.json: %w", err)
	}
	// "<" only occurs inside JSON strings, where \u003c means the same; escaped, no "</script>"
	// in a description can end the script element early.
	inline := bytes.ReplaceAll(compact.Bytes(), []byte("<"), []byte(`\u003c`))
	if bytes.Count(pageTemplate, []byte(placeholder)) != 1 {
		return nil, fmt.Errorf("page.html must hold %s exactly once", placeholder)
	}
	return bytes.Replace(pageTemplate, []byte(placeholder), inline, 1), nil
}
