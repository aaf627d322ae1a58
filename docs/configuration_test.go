// Package docs holds the tests of the documentation: the pages are the product's manual, and these
// tests keep what they say about the code true.
package docs

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	bloomeryv1alpha1 "github.com/bloomery/bloomery/api/v1alpha1"
	"github.com/bloomery/bloomery/dataplane/run"
	"github.com/bloomery/bloomery/operator"
)

// row is one row of a table of configuration.md: the names its first cell gives in backticks
// (a flag and its shorthand, a key and its alias) and its default cell.
type row struct {
	line  int
	names []string
	def   string
}

var backticked = regexp.MustCompile("`([^`]+)`")

// table reads the table under the heading "## <heading>" of configuration.md, by each name its
// rows give. A name given twice is an error: each fact has one row. dataplane/config/doc_test.go
// reads the table of the file's keys alike.
func table(t *testing.T, heading string) map[string]row {
	t.Helper()
	text, err := os.ReadFile("configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(text), "\n")
	rows := map[string]row{}
	in, header := false, 0
	for i, line := range lines {
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## "+heading
		case in && strings.HasPrefix(line, "|"):
			if header++; header <= 2 { // the header and the |---| line
				continue
			}
			cells := strings.Split(line, " | ")
			if len(cells) < 3 {
				t.Fatalf("configuration.md:%d: a row of three cells expected: %s", i+1, line)
			}
			r := row{line: i + 1, def: strings.TrimSpace(cells[1])}
			for _, m := range backticked.FindAllStringSubmatch(cells[0], -1) {
				r.names = append(r.names, m[1])
			}
			for _, name := range r.names {
				if other, ok := rows[name]; ok {
					t.Errorf("configuration.md:%d: %s has a row already, line %d", r.line, name, other.line)
				}
				rows[name] = r
			}
		}
	}
	if len(rows) == 0 {
		t.Fatalf("configuration.md has no table under ## %s", heading)
	}
	return rows
}

// defaultValue reads a default cell: a value in backticks first, or "none" (no default), or
// another word such as "required" or "ignored" that the caller expects.
func defaultValue(cell string) (value string, word string) {
	if m := backticked.FindStringSubmatchIndex(cell); m != nil && m[0] == 0 {
		return cell[m[2]:m[3]], ""
	}
	word, _, _ = strings.Cut(cell, ";")
	word, _, _ = strings.Cut(word, ":")
	return "", word
}

// checkedRows reports the rows whose names were not all checked: rows of flags, keys or fields
// that no longer exist.
func checkedRows(t *testing.T, rows map[string]row, checked map[string]bool) {
	t.Helper()
	for name, r := range rows {
		if !checked[name] {
			t.Errorf("configuration.md:%d: %s is no flag, key or field of the code", r.line, name)
		}
	}
}

// The flags tables list every flag of each role with the default its flag set gives it.
func TestConfigurationListsEveryFlag(t *testing.T) {
	// The defaults that come from the environment are documented as what they are without it.
	for _, env := range []string{"WATCH_NAMESPACE", "POD_NAMESPACE", "DATAPLANE_IMAGE"} {
		t.Setenv(env, "")
	}
	for heading, cmd := range map[string]*cobra.Command{
		"Data plane flags": run.NewCommand("<version>"),
		"Operator flags":   operator.NewCommand("<version>"),
	} {
		rows := table(t, heading)
		checked := map[string]bool{}
		cmd.InitDefaultHelpFlag() // cobra adds --help when it runs; it is a flag all the same
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			name := "--" + f.Name
			r, ok := rows[name]
			if !ok {
				t.Errorf("%s: %s has no row", heading, name)
				return
			}
			checked[name] = true
			if f.Shorthand != "" {
				checked["-"+f.Shorthand] = true
				if rows["-"+f.Shorthand].line != r.line {
					t.Errorf("configuration.md:%d: %s's row does not name its shorthand -%s", r.line, name, f.Shorthand)
				}
			}
			value, word := defaultValue(r.def)
			switch {
			case f.DefValue == "" && word != "none":
				t.Errorf("configuration.md:%d: %s has no default; the row says %q, want none", r.line, name, r.def)
			case f.DefValue != "" && value != f.DefValue:
				t.Errorf("configuration.md:%d: %s defaults to %q; the row says %q", r.line, name, f.DefValue, r.def)
			}
		})
		checkedRows(t, rows, checked)
	}
}

// The tables of the resources list every field of their spec with the default of the CRD's
// schema. A field of a type of another package (Kubernetes' own, such as resources or affinity)
// is one row: its fields are that type's.
func TestConfigurationListsEveryCRDField(t *testing.T) {
	for heading, kind := range map[string]struct {
		spec any
		crd  string
	}{
		"BloomCluster": {bloomeryv1alpha1.BloomClusterSpec{}, "bloomery.io_bloomclusters.yaml"},
		"BloomFilter":  {bloomeryv1alpha1.BloomFilterSpec{}, "bloomery.io_bloomfilters.yaml"},
	} {
		rows := table(t, heading)
		checked := map[string]bool{}
		raw, err := os.ReadFile(filepath.Join("..", "config", "crd", "bases", kind.crd))
		if err != nil {
			t.Fatal(err)
		}
		var crd struct {
			Spec struct {
				Versions []struct {
					Schema struct {
						OpenAPIV3Schema schema `json:"openAPIV3Schema"`
					} `json:"schema"`
				} `json:"versions"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(raw, &crd); err != nil || len(crd.Spec.Versions) != 1 {
			t.Fatalf("%s: %v, %d versions", kind.crd, err, len(crd.Spec.Versions))
		}
		var walk func(typ reflect.Type, s schema, parent string)
		walk = func(typ reflect.Type, s schema, parent string) {
			for field := range typ.Fields() {
				name, _, _ := strings.Cut(field.Tag.Get("json"), ",")
				path := parent + name
				prop, ok := s.Properties[name]
				if !ok {
					t.Errorf("%s: %s is not in the CRD's schema: run make manifests", kind.crd, path)
					continue
				}
				inner := field.Type
				if inner.Kind() == reflect.Pointer {
					inner = inner.Elem()
				}
				own := func(t reflect.Type) bool { return t.Kind() == reflect.Struct && t.PkgPath() == typ.PkgPath() }
				if own(inner) {
					walk(inner, prop, path+".")
					continue
				}
				checked[path] = true
				r, ok := rows[path]
				if !ok {
					t.Errorf("%s: %s has no row", heading, path)
					continue
				}
				value, word := defaultValue(r.def)
				required := false
				for _, n := range s.Required {
					required = required || n == name
				}
				switch {
				case required:
					if word != "required" {
						t.Errorf("configuration.md:%d: %s is required; the row says %q", r.line, path, r.def)
					}
				case prop.Default == nil:
					if word != "none" {
						t.Errorf("configuration.md:%d: %s has no default in the CRD; the row says %q", r.line, path, r.def)
					}
				default:
					var got any
					if err := yaml.Unmarshal([]byte(value), &got); err != nil || value == "" || !reflect.DeepEqual(got, prop.Default) {
						t.Errorf("configuration.md:%d: %s defaults to %v in the CRD; the row says %q", r.line, path, prop.Default, r.def)
					}
				}
				if inner.Kind() == reflect.Slice && own(inner.Elem()) {
					walk(inner.Elem(), *prop.Items, path+"[].")
				}
			}
		}
		walk(reflect.TypeOf(kind.spec), crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"], "spec.")
		checkedRows(t, rows, checked)
	}
}

// schema is the part of a CRD's OpenAPI schema the test reads.
type schema struct {
	Properties map[string]schema `json:"properties"`
	Items      *schema           `json:"items"`
	Required   []string          `json:"required"`
	Default    any               `json:"default"`
}
