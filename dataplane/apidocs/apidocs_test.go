package apidocs

import (
	"bytes"
	"encoding/json"
	"regexp"
	"testing"
)

func TestOpenAPIIsAnOpenAPI3Document(t *testing.T) {
	var doc struct {
		OpenAPI string                          `json:"openapi"`
		Info    struct{ Title, Version string } `json:"info"`
		Paths   map[string]map[string]any       `json:"paths"`
	}
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !regexp.MustCompile(`^3\.\d+\.\d+$`).MatchString(doc.OpenAPI) || doc.Info.Title == "" || doc.Info.Version == "" || len(doc.Paths) == 0 {
		t.Errorf("openapi %q, info %+v, %d paths: not an OpenAPI 3 document", doc.OpenAPI, doc.Info, len(doc.Paths))
	}
}

// The page carries the document inline, intact, and nothing in it can close its script element.
func TestPageInlinesTheDocument(t *testing.T) {
	page, err := Page()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)<script id="openapi" type="application/json">(.*?)</script>`).FindSubmatch(page)
	if m == nil {
		t.Fatal("no inline document in the page")
	}
	var inline, original any
	if err := json.Unmarshal(m[1], &inline); err != nil {
		t.Fatalf("inline document: %v", err)
	}
	if err := json.Unmarshal(OpenAPI(), &original); err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(inline)
	b, _ := json.Marshal(original)
	if !bytes.Equal(a, b) {
		t.Error("the inline document differs from openapi.json")
	}
	if bytes.Contains(m[1], []byte("<")) {
		t.Error(`the inline document holds a raw "<"`)
	}
	for _, external := range []string{`src="http`, `href="http`, `src="//`, `href="//`, "@import"} {
		if bytes.Contains(page, []byte(external)) {
			t.Errorf("the page loads something from elsewhere: %s", external)
		}
	}
}
