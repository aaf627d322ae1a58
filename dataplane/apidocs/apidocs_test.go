package apidocs

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/wire"
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

// schemaProps returns a component schema's properties, decoded.
func schemaProps(t *testing.T, schema string) map[string]map[string]any {
	t.Helper()
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]map[string]any `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	props := doc.Components.Schemas[schema].Properties
	if props == nil {
		t.Fatalf("no schema %s with properties", schema)
	}
	return props
}

// The defaults the document gives a create's fields are the data plane's: the configuration's
// built-in defaults and the engine's. A change to either fails here until the document follows.
func TestDocumentedDefaultsAreTheDataPlanes(t *testing.T) {
	def := config.Default()
	want := map[string]any{
		"expectedInsertions":     float64(def.DefaultExpectedInsertions),
		"fpp":                    def.DefaultFPP,
		"validPeriodAfterCreate": def.DefaultValidAfterCreate.Seconds(),
		"scalable":               true,
		"growth":                 float64(filter.DefaultGrowth),
		"tightening":             filter.DefaultTightening,
		"overwrite":              false,
		"failIfExists":           false,
	}
	props := schemaProps(t, "CreateRequest")
	for field, value := range want {
		got, ok := props[field]["default"]
		if !ok || got != value {
			t.Errorf("CreateRequest.%s: default %v, want %v", field, got, value)
		}
	}
	// The three that a configuration file may change say so, with the built-in value.
	for field, key := range map[string]string{
		"expectedInsertions":     "defaultExpectedInsertions",
		"fpp":                    "defaultFalsePositiveProbability",
		"validPeriodAfterCreate": "defaultValidSecondsAfterCreate",
	} {
		desc, _ := props[field]["description"].(string)
		if value := strconv.FormatFloat(want[field].(float64), 'f', -1, 64); !strings.Contains(desc, key) || !strings.Contains(desc, value) {
			t.Errorf("CreateRequest.%s: description %q, want it to name %s and %s", field, desc, key, value)
		}
	}
}

// The error codes the document lists are those of the wire contract, each with its HTTP status,
// and the table of errors of docs/api.md says the same.
func TestDocumentedErrorCodesAreTheWires(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas struct {
				Error struct {
					Properties struct {
						Code struct {
							Enum []int `json:"enum"`
						} `json:"code"`
					} `json:"properties"`
					Codes []struct {
						Code    int    `json:"code"`
						Status  string `json:"status"`
						Meaning string `json:"meaning"`
					} `json:"x-codes"`
				} `json:"Error"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	e := doc.Components.Schemas.Error

	// Every Code constant of the wire package, read from its source so that a new one is seen.
	files, err := filepath.Glob("../wire/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("the wire package's files: %v", err)
	}
	var wireCodes []int
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?m)^\s*Code\w+\s*=\s*(\d+)`).FindAllSubmatch(src, -1) {
			n, _ := strconv.Atoi(string(m[1]))
			wireCodes = append(wireCodes, n)
		}
	}
	slices.Sort(wireCodes)
	var documented []int
	status := map[int]string{}
	for _, c := range e.Codes {
		documented = append(documented, c.Code)
		status[c.Code] = c.Status
		if c.Meaning == "" {
			t.Errorf("code %d has no meaning", c.Code)
		}
	}
	if !slices.Equal(documented, wireCodes) || !slices.Equal(e.Properties.Code.Enum, wireCodes) {
		t.Errorf("the wire's codes are %v; the document lists %v in x-codes and %v in the enum", wireCodes, documented, e.Properties.Code.Enum)
	}
	// The statuses the wire's comments give ("HTTP 400").
	for code, want := range map[int]string{
		wire.CodeBadParameter: "400", wire.CodeFilterNotFound: "404", wire.CodeBodyTooLarge: "413",
		wire.CodeInsufficientSpace: "507", wire.CodeNoSuchRoute: "404/405", wire.CodeInternal: "500",
		wire.CodeUnavailable: "503", wire.CodeStaleEpoch: "409", wire.CodeReplication: "503",
		wire.CodeUnauthorized: "401", wire.CodeFilterExists: "409", wire.CodeNotJournaled: "507",
		wire.CodeHomeUnavailable: "503", wire.CodeLeaseLapsed: "503",
	} {
		if status[code] != want {
			t.Errorf("code %d: status %q, want %q", code, status[code], want)
		}
	}

	apiDoc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(apiDoc), "\n## Errors\n")
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile(`(?m)^\| (\d+) \| ([0-9 /]+) \|`)
	docStatus := map[int]string{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		n, _ := strconv.Atoi(m[1])
		docStatus[n] = strings.ReplaceAll(m[2], " ", "")
	}
	if !maps.Equal(docStatus, status) {
		t.Errorf("the table of errors of docs/api.md says %v, the OpenAPI document %v", docStatus, status)
	}
}

// The links to the rest of the documentation point into the project's repository, at files that
// exist.
func TestDocumentationLinksExist(t *testing.T) {
	var doc struct {
		ExternalDocs struct{ URL string }   `json:"externalDocs"`
		Docs         []struct{ URL string } `json:"x-docs"`
	}
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	urls := []string{doc.ExternalDocs.URL}
	for _, d := range doc.Docs {
		urls = append(urls, d.URL)
	}
	if len(urls) < 2 {
		t.Fatalf("links %v: want the README and the docs", urls)
	}
	const repository = "https://github.com/bloomery/bloomery/blob/main/"
	for _, u := range urls {
		path, ok := strings.CutPrefix(u, repository)
		if !ok {
			t.Errorf("link %q is not into %s", u, repository)
			continue
		}
		if _, err := os.Stat(filepath.Join("../..", filepath.FromSlash(path))); err != nil {
			t.Errorf("link %q: %v", u, err)
		}
	}
}
