package config

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// docRow is a row of the table of docs/configuration.md: the line, and its default cell.
type docRow struct {
	line int
	def  string
}

var docBackticked = regexp.MustCompile("`([^`]+)`")

// docTable reads the table "## Configuration file" of docs/configuration.md by each key its first
// cell names in backticks (a key and its alias share a row). docs/configuration_test.go reads the
// page's other tables the same way.
func docTable(t *testing.T) map[string]docRow {
	t.Helper()
	text, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]docRow{}
	in, header := false, 0
	for i, line := range strings.Split(string(text), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## Configuration file"
		case in && strings.HasPrefix(line, "|"):
			if header++; header <= 2 { // the header and the |---| line
				continue
			}
			cells := strings.Split(line, " | ")
			if len(cells) < 3 {
				t.Fatalf("docs/configuration.md:%d: a row of three cells expected: %s", i+1, line)
			}
			for _, m := range docBackticked.FindAllStringSubmatch(cells[0], -1) {
				if other, ok := rows[m[1]]; ok {
					t.Errorf("docs/configuration.md:%d: %s has a row already, line %d", i+1, m[1], other.line)
				}
				rows[m[1]] = docRow{i + 1, strings.TrimSpace(cells[1])}
			}
		}
	}
	if len(rows) == 0 {
		t.Fatal("docs/configuration.md has no table under ## Configuration file")
	}
	return rows
}

// docDefault reads a default cell: a value in backticks first, or a word ("none", "required",
// "ignored") before any ":" or ";".
func docDefault(cell string) (value, word string) {
	if m := docBackticked.FindStringSubmatchIndex(cell); m != nil && m[0] == 0 {
		return cell[m[2]:m[3]], ""
	}
	word, _, _ = strings.Cut(cell, ";")
	word, _, _ = strings.Cut(word, ":")
	return "", word
}

// docs/configuration.md is the one place that lists the file's keys and their defaults: it has a
// row for every key of File and none for a key that is not one, and each row's default, read as
// the file would read it, is Default's.
func TestConfigurationDocListsEveryKey(t *testing.T) {
	rows := docTable(t)
	checked := map[string]bool{}
	var walk func(defaults reflect.Value, typ reflect.Type, parent string, inList bool)
	walk = func(defaults reflect.Value, typ reflect.Type, parent string, inList bool) {
		for i, field := range reflect.VisibleFields(typ) {
			key := parent + yamlKey(field)
			checked[key] = true
			if target := field.Tag.Get("aliasOf"); target != "" {
				// An alias has no row of its own: the row of the key it stands for names it.
				if r, ok := rows[key]; !ok || r.line != rows[target].line {
					t.Errorf("the alias %s is not named in the row of %s", key, target)
				}
				continue
			}
			def := reflect.Value{} // the default; invalid where there is none
			if defaults.IsValid() {
				def = defaults.Field(i)
			}
			if def.IsValid() && def.Kind() == reflect.Pointer {
				def = reflect.Indirect(def) // invalid when nil
			}
			inner := field.Type
			if inner.Kind() == reflect.Pointer {
				inner = inner.Elem()
			}
			if inner.Kind() == reflect.Struct {
				delete(checked, key) // a mapping of keys has no row; each of its keys has one
				walk(def, inner, key+".", inList)
				continue
			}
			r, ok := rows[key]
			if !ok {
				t.Errorf("the key %s has no row in docs/configuration.md", key)
				continue
			}
			value, word := docDefault(r.def)
			switch {
			case field.Tag.Get("ignored") != "":
				if word != "ignored" {
					t.Errorf("docs/configuration.md:%d: %s is ignored; the row says %q", r.line, key, r.def)
				}
			case inList: // the keys of a list's items have no default
				if word != "required" {
					t.Errorf("docs/configuration.md:%d: %s is required; the row says %q", r.line, key, r.def)
				}
			case key == "maxTotalBytes":
				// Left out, the data plane derives it at start from the memory limit it finds.
				if want := fmt.Sprintf("%g%% of", MemoryShare*100); def.Uint() != 0 || !strings.HasPrefix(r.def, want) {
					t.Errorf("docs/configuration.md:%d: %s is %d, and then a share %g of the memory limit; the row says %q",
						r.line, key, def.Uint(), MemoryShare, r.def)
				}
			case !def.IsValid():
				if word != "none" {
					t.Errorf("docs/configuration.md:%d: %s has no default; the row says %q", r.line, key, r.def)
				}
			default:
				got := reflect.New(def.Type())
				if err := yaml.Unmarshal([]byte(value), got.Interface()); value == "" || err != nil {
					t.Errorf("docs/configuration.md:%d: %s: the default %q does not read as the file's value: %v", r.line, key, r.def, err)
				} else if !reflect.DeepEqual(got.Elem().Interface(), def.Interface()) {
					t.Errorf("docs/configuration.md:%d: %s defaults to %v; the row says %q", r.line, key, def.Interface(), r.def)
				}
			}
			if inner.Kind() == reflect.Slice && inner.Elem().Kind() == reflect.Struct {
				walk(reflect.Value{}, inner.Elem(), key+"[].", true)
			}
		}
	}
	// Default as a file that sets every key it has a value for.
	f := Default().file()
	walk(reflect.ValueOf(f), reflect.TypeOf(f), "", false)
	for key, r := range rows {
		if !checked[key] {
			t.Errorf("docs/configuration.md:%d: %s is not a key of the file", r.line, key)
		}
	}
}
