package process

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/config"
)

// The README's examples, and those of docs/api.md that go on from them, are a contract: a newcomer
// pastes them and must see what the comments say.

// exampleDocs are the documents whose curl commands run, in this order, on one data plane.
var exampleDocs = []string{"README.md", "docs/api.md"}

// readmeCommand is one curl command of a document and what its comment says it answers.
type readmeCommand struct {
	doc    string   // the document, as exampleDocs names it
	line   int      // where it starts in the document
	words  []string // the command line, split as sh would
	status int
	body   string // a JSON value, or a bare word such as pong; empty: the body is not checked
}

// readmeStart is the command line that "Try it in one minute" starts the data plane with.
var readmeStart = regexp.MustCompile(`(?m)^bin/bloomery (dataplane[^#\n]*?)\s*(?:#.*)?$`)

// expectation is a comment "# <status>[ <body>][ — <prose>]".
var expectation = regexp.MustCompile(`^#\s*(\d{3})(?:\s+([^—\s].*?))?(?:\s+—\s.*)?$`)

// readmeCommands returns every curl command of the sh blocks of doc, whose text is readme, in
// order. A command's comment is at the end of its last line or alone on the next line; a command
// without one is an error, so that no example goes unchecked.
func readmeCommands(doc, readme string) ([]readmeCommand, error) {
	// The logical lines of the sh blocks, continuations joined, with the line each starts on.
	type logical struct {
		line int
		text string
	}
	var lines []logical
	inSh, joining := false, false
	for i, line := range strings.Split(readme, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			inSh = trimmed == "```sh"
			lines = append(lines, logical{i + 1, ""}) // a block's end ends a pending command
			joining = false
			continue
		}
		if !inSh {
			continue
		}
		text, continued := strings.CutSuffix(trimmed, `\`)
		if joining {
			lines[len(lines)-1].text += " " + strings.TrimSpace(text)
		} else {
			lines = append(lines, logical{i + 1, strings.TrimSpace(text)})
		}
		joining = continued
	}

	var cmds []readmeCommand
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if !strings.HasPrefix(l.text, "curl ") {
			continue
		}
		words, comment, err := shellWords(l.text)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", doc, l.line, err)
		}
		if comment == "" && i+1 < len(lines) && strings.HasPrefix(lines[i+1].text, "#") {
			comment = lines[i+1].text
		}
		m := expectation.FindStringSubmatch(strings.TrimSpace(comment))
		if m == nil {
			return nil, fmt.Errorf("%s line %d: %q has no comment \"# <status> [body]\"", doc, l.line, l.text)
		}
		status, _ := strconv.Atoi(m[1])
		cmds = append(cmds, readmeCommand{doc: doc, line: l.line, words: words, status: status, body: m[2]})
	}
	return cmds, nil
}

// shellWords splits a command line as sh would, for the quoting the README uses (single and
// double quotes), and returns the comment that ends it.
func shellWords(s string) (words []string, comment string, err error) {
	var word strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		switch ch := s[i]; {
		case ch == '\'' || ch == '"':
			end := strings.IndexByte(s[i+1:], ch)
			if end < 0 {
				return nil, "", fmt.Errorf("unterminated quote in %q", s)
			}
			word.WriteString(s[i+1 : i+1+end])
			i += end + 1
			inWord = true
		case ch == ' ' || ch == '\t':
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		case ch == '#' && !inWord:
			return words, s[i:], nil
		default:
			word.WriteByte(ch)
			inWord = true
		}
	}
	if inWord {
		words = append(words, word.String())
	}
	return words, "", nil
}

// curl sends the request a README curl command describes, as curl would, to base instead of
// localhost:8080. It knows the options the README uses and refuses any other.
func curl(t *testing.T, base string, words []string) (int, []byte) {
	t.Helper()
	method, url, body, headers := "", "", "", http.Header{}
	hasBody := false
	for i := 1; i < len(words); i++ {
		switch w := words[i]; w {
		case "-i", "-s", "-sS", "--silent", "--include":
		case "-X", "--request":
			i++
			method = words[i]
		case "-d", "--data":
			i++
			body, hasBody = words[i], true
		case "-H", "--header":
			i++
			k, v, _ := strings.Cut(words[i], ":")
			headers.Add(k, strings.TrimSpace(v))
		default:
			if strings.HasPrefix(w, "-") {
				t.Fatalf("curl option %s: the README test does not know it", w)
			}
			if url != "" {
				t.Fatalf("two URLs: %s and %s", url, w)
			}
			url = w
		}
	}
	rest, ok := strings.CutPrefix(url, "localhost:8080")
	if !ok {
		t.Fatalf("URL %q: the README's examples call localhost:8080", url)
	}
	if method == "" {
		method = http.MethodGet
		if hasBody {
			method = http.MethodPost
		}
	}
	req, err := http.NewRequestWithContext(t.Context(), method, base+rest, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if hasBody && headers.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded") // curl -d's
	}
	maps.Copy(req.Header, headers)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, got
}

// contains reports whether got holds want: an object holds the fields of want's (recursively),
// any other value equals it.
func contains(want, got any) bool {
	w, ok := want.(map[string]any)
	if !ok {
		return reflect.DeepEqual(want, got)
	}
	g, ok := got.(map[string]any)
	if !ok {
		return false
	}
	for k, v := range w {
		if !contains(v, g[k]) {
			return false
		}
	}
	return true
}

// TestREADMEExamples starts the data plane as "Try it in one minute" says, then runs every curl
// command of the README and then of docs/api.md in order, as a reader would, and checks the status
// and body its comment gives.
func TestREADMEExamples(t *testing.T) {
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	start := readmeStart.FindStringSubmatch(readme)
	if start == nil {
		t.Fatal("the README starts no data plane with bin/bloomery dataplane")
	}
	args := strings.Fields(start[1])[1:]
	dp := startDataPlane(t, t.TempDir(), args...)
	base := "http://" + dp.addr

	var cmds []readmeCommand
	for _, doc := range exampleDocs {
		text, err := os.ReadFile("../../" + doc)
		if err != nil {
			t.Fatal(err)
		}
		of, err := readmeCommands(doc, string(text))
		if err != nil {
			t.Fatal(err)
		}
		// The README tries a few; docs/api.md shows every endpoint.
		if least := map[string]int{"README.md": 3, "docs/api.md": 10}[doc]; len(of) < least {
			t.Fatalf("%d curl commands in %s: the parser misses some", len(of), doc)
		}
		cmds = append(cmds, of...)
	}
	for _, c := range cmds {
		status, body := curl(t, base, c.words)
		what := fmt.Sprintf("%s line %d, %s", c.doc, c.line, strings.Join(c.words, " "))
		if status != c.status {
			t.Errorf("%s: %d %s, the document says %d", what, status, body, c.status)
			continue
		}
		if c.body == "" {
			continue
		}
		var want, got any
		if json.Unmarshal([]byte(c.body), &want) != nil {
			if strings.TrimSpace(string(body)) != c.body {
				t.Errorf("%s: body %q, the document says %q", what, body, c.body)
			}
			continue
		}
		if err := json.NewDecoder(bytes.NewReader(body)).Decode(&got); err != nil || !contains(want, got) {
			t.Errorf("%s: body %s, the document says it holds %s", what, body, c.body)
		}
	}

	// "That filter expires in one day": the first filter, created without an expiry, expires
	// defaultValidSecondsAfterCreate after its creation, and that default is one day.
	status, body := curl(t, base, []string{"curl", "localhost:8080/v1/bloomfilter/users"})
	var users struct{ Created, Expiration time.Time }
	if err := json.Unmarshal(body, &users); status != http.StatusOK || err != nil {
		t.Fatalf("GET users: %d %s", status, body)
	}
	if got := users.Expiration.Sub(users.Created); got != 24*time.Hour || config.Default().DefaultValidAfterCreate != 24*time.Hour ||
		!strings.Contains(readme, "**That filter expires in one day.**") {
		t.Errorf("the README says a filter created without an expiry expires in one day; users expires %v after its creation, and the default is %v",
			got, config.Default().DefaultValidAfterCreate)
	}

	// The docs page the README sends the reader to is there.
	status, _ = curl(t, base, []string{"curl", "localhost:8080/v1/docs/"})
	if named := strings.Contains(readme, "<http://localhost:8080/v1/docs/>"); !named || status != http.StatusOK {
		t.Errorf("the docs page answers %d; the README names it: %v", status, named)
	}
}
