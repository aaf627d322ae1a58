package docs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// A page moves facts to other pages and links to them: every relative link of every Markdown
// file of the repository must reach a file, and every #anchor a heading of its page, or a reader
// following it lands nowhere.
func TestRelativeLinksResolve(t *testing.T) {
	const root = ".."
	var pages []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "dist" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			pages = append(pages, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]map[string]bool{} // by page, read once
	anchorsOf := func(page string) map[string]bool {
		if a, ok := anchors[page]; ok {
			return a
		}
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		anchors[page] = headingAnchors(string(text))
		return anchors[page]
	}
	for _, page := range pages {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range links(string(text)) {
			where := fmt.Sprintf("%s:%d", strings.TrimPrefix(page, root+"/"), l.line)
			file, anchor, _ := strings.Cut(l.target, "#")
			target := page
			if file != "" {
				target = filepath.Join(filepath.Dir(page), file)
				if _, err := os.Stat(target); err != nil {
					t.Errorf("%s: link to %s: no such file", where, l.target)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(target, ".md") && !anchorsOf(target)[anchor] {
				t.Errorf("%s: link to %s: no heading of %s has the anchor #%s", where, l.target, strings.TrimPrefix(target, root+"/"), anchor)
			}
		}
	}
}

type link struct {
	line   int
	target string
}

var (
	markdownLink = regexp.MustCompile(`\]\(([^()\s]+)\)`)
	inlineCode   = regexp.MustCompile("`[^`]*`")
)

// links are the relative links of a Markdown text, outside code.
func links(text string) []link {
	var out []link
	inCode := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inCode = !inCode
			continue
		}
		if inCode {
			continue
		}
		for _, m := range markdownLink.FindAllStringSubmatch(inlineCode.ReplaceAllString(line, ""), -1) {
			if target := m[1]; !strings.Contains(target, "://") && !strings.HasPrefix(target, "mailto:") {
				out = append(out, link{i + 1, target})
			}
		}
	}
	return out
}

// headingAnchors are the anchors GitHub gives the headings of a Markdown text: lower case, spaces
// as hyphens, other punctuation dropped, and -1, -2... after a repeated one.
func headingAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	inCode := false
	for line := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		heading := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(heading) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		anchor := b.String()
		for n := 1; anchors[anchor]; n++ {
			anchor = fmt.Sprintf("%s-%d", b.String(), n)
		}
		anchors[anchor] = true
	}
	return anchors
}
