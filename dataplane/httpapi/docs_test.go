package httpapi

import (
	"context"
	"encoding/json"
	"html"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/apidocs"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/internal/testassets"
)

func docsServer(t *testing.T, enabled bool) (*Server, *httptest.Server) {
	t.Helper()
	cfg := config.Default()
	cfg.DocsEnabled = enabled
	s := newTestAPI(t, cfg)
	hs := httptest.NewServer(s.ClientHandler())
	t.Cleanup(hs.Close)
	return s, hs
}

// registeredEndpoints are the client port's routes as "METHOD /path/{param}", the OpenAPI
// spelling: the document is the applications', served on their port.
func registeredEndpoints(s *Server) []string {
	param := regexp.MustCompile(`:(\w+)`)
	var out []string
	for _, r := range s.client.Routes() {
		out = append(out, r.Method+" "+param.ReplaceAllString(r.Path, "{$1}"))
	}
	slices.Sort(out)
	return out
}

// documentedEndpoints are the operations of the OpenAPI document as "METHOD /path".
func documentedEndpoints(t *testing.T, doc []byte) []string {
	t.Helper()
	var spec struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(doc, &spec); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	var out []string
	for path, item := range spec.Paths {
		for method := range item {
			if method != "parameters" && method != "summary" && method != "description" {
				out = append(out, strings.ToUpper(method)+" "+path)
			}
		}
	}
	slices.Sort(out)
	return out
}

// The document and the router must agree: every route documented, nothing documented that does
// not exist.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	s, _ := docsServer(t, true)
	routes, documented := registeredEndpoints(s), documentedEndpoints(t, apidocs.OpenAPI())
	for _, r := range routes {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is not in openapi.json", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(routes, d) {
			t.Errorf("openapi.json documents %s, which the server does not route", d)
		}
	}
	if len(routes) < 15 {
		t.Errorf("only %d routes: %v", len(routes), routes)
	}
}

func get(t *testing.T, url string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Redirects are part of what is tested.
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, body
}

func TestDocsOnlyWithTheFlag(t *testing.T) {
	_, without := docsServer(t, false)
	for _, path := range []string{"/v1/docs", "/v1/docs/", "/v1/docs/openapi.json"} {
		if status, _, body := get(t, without.URL+path); status != http.StatusNotFound {
			t.Errorf("without -d, GET %s = %d %s; want 404", path, status, body)
		}
	}

	_, with := docsServer(t, true)
	status, header, body := get(t, with.URL+"/v1/docs/")
	if status != http.StatusOK || !strings.HasPrefix(header.Get("Content-Type"), "text/html") || !strings.Contains(string(body), "<script") {
		t.Errorf("GET /v1/docs/ = %d %s", status, header.Get("Content-Type"))
	}
	status, header, body = get(t, with.URL+"/v1/docs/openapi.json")
	if status != http.StatusOK || !strings.HasPrefix(header.Get("Content-Type"), "application/json") || !json.Valid(body) {
		t.Errorf("GET /v1/docs/openapi.json = %d %s", status, header.Get("Content-Type"))
	}
	status, header, _ = get(t, with.URL+"/v1/docs")
	if status != http.StatusMovedPermanently || header.Get("Location") != "/v1/docs/" {
		t.Errorf("GET /v1/docs = %d to %q, want 301 to /v1/docs/", status, header.Get("Location"))
	}
}

// chromium finds the browser: $CHROMIUM, or Debian's chromium on the PATH.
func chromium(t *testing.T) string {
	t.Helper()
	testassets.SkipInShort(t, "a browser (Chromium)")
	if path := os.Getenv("CHROMIUM"); path != "" {
		return path
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	// Skipping must be asked for, and never in CI: a test that skips silently proves nothing.
	if os.Getenv("BLOOMERY_SKIP_BROWSER_TESTS") == "1" && os.Getenv("CI") == "" {
		t.Skip("no chromium, and BLOOMERY_SKIP_BROWSER_TESTS=1")
	}
	t.Fatal("this test opens the API documentation page in headless Chromium, and none was found: " +
		"install Debian's package (apt-get install chromium; .ci/run does), set CHROMIUM to a browser binary, " +
		"or set BLOOMERY_SKIP_BROWSER_TESTS=1 to skip it on your machine")
	return ""
}

// A person opening /v1/docs/ sees every endpoint, rendered by the page's own script from the
// inlined document, without anything fetched from elsewhere.
func TestDocsPageListsTheEndpointsInABrowser(t *testing.T) {
	browser := chromium(t)
	s, hs := docsServer(t, true)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--no-first-run", "--no-default-browser-check",
		"--user-data-dir="+t.TempDir(), "--dump-dom", hs.URL+"/v1/docs/")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	dom, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", browser, err, stderr.String())
	}

	listed := regexp.MustCompile(`<details class="operation"[^>]* data-method="([A-Z]+)" data-path="([^"]+)"`).FindAllSubmatch(dom, -1)
	seen := map[string]bool{}
	for _, m := range listed {
		seen[string(m[1])+" "+html.UnescapeString(string(m[2]))] = true
	}
	if want, got := registeredEndpoints(s), slices.Sorted(maps.Keys(seen)); !slices.Equal(want, got) {
		t.Errorf("the page lists\n%v\nthe server routes\n%v\nDOM:\n%s", got, want, dom)
	}
	for _, text := range []string{"Bloomery data plane (v1)", "Check and add a value", "Send POST request", `href="openapi.json"`} {
		if !strings.Contains(string(dom), text) {
			t.Errorf("the rendered page lacks %q", text)
		}
	}
}
