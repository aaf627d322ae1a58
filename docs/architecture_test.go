package docs

import (
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const module = "github.com/bloomery/bloomery"

// importRules reads the table of architecture.md between its imports markers: for each package
// (by its path in the module, "." for the root), the packages of ours it may import.
func importRules(t *testing.T) map[string][]string {
	t.Helper()
	text, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(text), "<!-- imports: begin -->")
	table, _, ok2 := strings.Cut(rest, "<!-- imports: end -->")
	if !ok || !ok2 {
		t.Fatal("architecture.md has no table between <!-- imports: begin --> and <!-- imports: end -->")
	}
	rules := map[string][]string{}
	for line := range strings.SplitSeq(table, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.TrimSuffix(strings.TrimPrefix(line, "| "), "|"), " | ")
		if len(cells) != 3 {
			t.Fatalf("architecture.md: a row of %d cells, want package, owns, imports: %s", len(cells), line)
		}
		pkg := strings.Trim(cells[0], "`")
		if _, twice := rules[pkg]; twice {
			t.Errorf("architecture.md lists %s twice", pkg)
		}
		rules[pkg] = []string{}
		for _, m := range backticked.FindAllStringSubmatch(cells[2], -1) {
			rules[pkg] = append(rules[pkg], m[1])
		}
	}
	return rules
}

// imports are the packages of ours that each package's code imports (its tests left out), by
// go list, with the end-to-end suite's build tag so that its packages count too.
func imports(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", "list", "-tags", "e2e", "-f", "{{.ImportPath}} {{len .GoFiles}} {{join .Imports \" \"}}", "./...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	got := map[string][]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if fields[1] == "0" {
			continue // tests alone, as this package
		}
		pkg := strings.TrimPrefix(strings.TrimPrefix(fields[0], module), "/")
		if pkg == "" {
			pkg = "."
		}
		got[pkg] = []string{}
		for _, imp := range fields[2:] {
			if ours, ok := strings.CutPrefix(imp, module+"/"); ok {
				got[pkg] = append(got[pkg], ours)
			}
		}
		slices.Sort(got[pkg])
	}
	return got
}

// The table of architecture.md names every package of the module, and for each exactly the
// packages of ours its code imports: a new package or import changes the table with it.
func TestArchitectureListsEveryImport(t *testing.T) {
	rules, got := importRules(t), imports(t)
	for _, pkg := range slices.Sorted(maps.Keys(got)) {
		want, listed := rules[pkg]
		switch {
		case !listed:
			t.Errorf("%s is not in architecture.md's table of packages; it imports %v", pkg, got[pkg])
		case !slices.Equal(slices.Sorted(slices.Values(want)), got[pkg]):
			t.Errorf("%s imports %v of ours; architecture.md says %v", pkg, got[pkg], want)
		}
	}
	for pkg := range rules {
		if _, ok := got[pkg]; !ok {
			t.Errorf("architecture.md lists %s, which is not a package of the module", pkg)
		}
	}
}

// depguardRule is one rule of .golangci.yml's depguard settings.
type depguardRule struct {
	Files    []string `json:"files"`
	ListMode string   `json:"list-mode"`
	Allow    []string `json:"allow"`
	Deny     []struct {
		Pkg string `json:"pkg"`
	} `json:"deny"`
}

// The linter's allow-lists say what architecture.md's table says: a rule per package, over its
// own files, that denies the module and allows the packages of its row.
func TestLinterEnforcesTheArchitecture(t *testing.T) {
	raw, err := os.ReadFile("../.golangci.yml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Linters struct {
			Settings struct {
				Depguard struct {
					Rules map[string]depguardRule `json:"rules"`
				} `json:"depguard"`
			} `json:"settings"`
		} `json:"linters"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	byFiles := map[string]depguardRule{}
	for name, r := range cfg.Linters.Settings.Depguard.Rules {
		if len(r.Files) == 0 {
			t.Errorf("depguard rule %s names no files", name)
			continue
		}
		byFiles[r.Files[0]] = r
	}
	for pkg, want := range importRules(t) {
		glob := "**/" + pkg + "/*.go"
		if pkg == "." {
			glob = "**/main.go"
		}
		r, ok := byFiles[glob]
		if !ok {
			t.Errorf("no depguard rule for %s (files %q)", pkg, glob)
			continue
		}
		var allowed []string
		for _, a := range r.Allow {
			if ours, ok := strings.CutPrefix(strings.TrimSuffix(a, "$"), module+"/"); ok {
				allowed = append(allowed, ours)
			}
		}
		denies := slices.ContainsFunc(r.Deny, func(d struct {
			Pkg string `json:"pkg"`
		}) bool {
			return d.Pkg == module
		})
		if r.ListMode != "lax" || !denies || !slices.Contains(r.Files, "!$test") {
			t.Errorf("the depguard rule of %s: list-mode %q, denies the module %v, files %v; want lax, the module denied, tests left out", pkg, r.ListMode, denies, r.Files)
		}
		if !slices.Equal(slices.Sorted(slices.Values(allowed)), slices.Sorted(slices.Values(want))) {
			t.Errorf("the depguard rule of %s allows %v; architecture.md says %v", pkg, allowed, want)
		}
	}
}
