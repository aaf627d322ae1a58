package httpapi_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/test/dataplane"
)

func TestPing(t *testing.T) {
	t.Parallel()
	s := dataplane.Handlers(t, nil)
	r := s.Send(t, http.MethodGet, "/v1/ping", "")
	if r.Status != http.StatusOK || string(r.Body) != "pong" {
		t.Fatalf("GET /v1/ping = %d %q, want 200 pong", r.Status, r.Body)
	}
	if err := s.Client.Ping(t.Context()); err != nil {
		t.Fatalf("client Ping: %v", err)
	}
}

// A create of an existing filter answers it unchanged with 200, unless overwrite is true.
func TestCreateExistingFilter(t *testing.T) {
	t.Parallel()
	s := dataplane.Handlers(t, nil)
	ctx := t.Context()

	r := s.Send(t, http.MethodPut, "/v1/bloomfilter/f", `{"expectedInsertions":1000,"fpp":0.001}`)
	var first wire.Filter
	r.WantJSON(t, http.StatusCreated, &first)
	if err := s.Client.MultiSet(ctx, "f", []string{"a", "b"}); err != nil {
		t.Fatalf("MultiSet: %v", err)
	}

	for _, body := range []string{`{"expectedInsertions":5000}`, `{"expectedInsertions":5000,"overwrite":false}`, ``} {
		var again wire.Filter
		s.Send(t, http.MethodPut, "/v1/bloomfilter/f", body).WantJSON(t, http.StatusOK, &again)
		if again.ExpectedInsertions != 1000 || again.FPP != 0.001 || again.Created != first.Created || again.Items != 2 {
			t.Errorf("PUT %s on an existing filter answered %+v, want the existing filter (1000, 0.001, %s, 2 items)",
				body, again, first.Created)
		}
	}
	if got := dataplane.MultiCheck(t, s, "f", []string{"a", "b"}); !slices.Equal(got, []bool{true, true}) {
		t.Errorf("values after repeated creates = %v, want both still present", got)
	}

	// The answer names the fields the existing filter kept its own values of, and failIfExists
	// refuses instead, as RedisBloom's BF.RESERVE does.
	var kept wire.Filter
	s.Send(t, http.MethodPut, "/v1/bloomfilter/f", `{"expectedInsertions":5000,"fpp":0.001,"growth":4}`).WantJSON(t, http.StatusOK, &kept)
	if !slices.Equal(kept.IgnoredParameters, []string{"expectedInsertions", "growth"}) {
		t.Errorf("ignoredParameters = %v, want expectedInsertions and growth (fpp is the same)", kept.IgnoredParameters)
	}
	var same map[string]any
	s.Send(t, http.MethodPut, "/v1/bloomfilter/f", `{"expectedInsertions":1000}`).WantJSON(t, http.StatusOK, &same)
	if _, ok := same["ignoredParameters"]; ok {
		t.Errorf("a create with the filter's own parameters answered ignoredParameters: %v", same)
	}
	msg := s.Send(t, http.MethodPut, "/v1/bloomfilter/f", `{"fpp":0.01,"failIfExists":true}`).WantError(t, http.StatusConflict, wire.CodeFilterExists)
	if msg != `filter "f" exists with other fpp; overwrite: true replaces it, empty` {
		t.Errorf("failIfExists on an existing filter: %q", msg)
	}
	s.Send(t, http.MethodPut, "/v1/bloomfilter/g", `{"failIfExists":true}`).WantJSON(t, http.StatusCreated, new(wire.Filter))

	var replaced wire.Filter
	s.Send(t, http.MethodPut, "/v1/bloomfilter/f", `{"expectedInsertions":5000,"overwrite":true}`).
		WantJSON(t, http.StatusCreated, &replaced)
	if replaced.ExpectedInsertions != 5000 || replaced.FPP != config.Default().DefaultFPP || replaced.Items != 0 {
		t.Errorf("overwrite answered %+v, want a new empty filter of 5000 with the default fpp", replaced)
	}
	if got := dataplane.MultiCheck(t, s, "f", []string{"a", "b"}); !slices.Equal(got, []bool{false, false}) {
		t.Errorf("values after overwrite = %v, want both gone", got)
	}
	if got := dataplane.Get(t, s, "f"); got.ExpectedInsertions != 5000 || got.Items != 0 {
		t.Errorf("GET after overwrite = %+v, want the new filter", got)
	}
}

// A create may name the filter's owner, a UUID: the filter keeps it, answers it wherever it is
// described, and a create that finds it with another owner says so.
func TestCreateKeepsItsOwner(t *testing.T) {
	t.Parallel()
	s := dataplane.Handlers(t, nil)
	const owner = "37e7e58f-edbd-4441-9d81-b2b3bc8ae93c"

	var created wire.Filter
	s.Send(t, http.MethodPut, "/v1/bloomfilter/f", `{"expectedInsertions":1000,"owner":"`+strings.ToUpper(owner)+`"}`).
		WantJSON(t, http.StatusCreated, &created)
	if created.Owner != owner {
		t.Errorf("create answered owner %q, want %q", created.Owner, owner)
	}
	if got := dataplane.Get(t, s, "f"); got.Owner != owner {
		t.Errorf("GET answered owner %q, want %q", got.Owner, owner)
	}
	if st, err := s.Internal.Client.FilterStatus(t.Context(), "f"); err != nil || st.Owner != owner {
		t.Errorf("status answered owner %q (%v), want %q", st.Owner, err, owner)
	}

	var kept wire.Filter
	s.Send(t, http.MethodPut, "/v1/bloomfilter/f", `{"expectedInsertions":1000,"owner":"0d7c5d2a-54a0-4c4e-8a37-6a1f2f1f0b9e"}`).
		WantJSON(t, http.StatusOK, &kept)
	if kept.Owner != owner || !slices.Equal(kept.IgnoredParameters, []string{"owner"}) {
		t.Errorf("a create with another owner answered owner %q, ignoredParameters %v; want %q and [owner]", kept.Owner, kept.IgnoredParameters, owner)
	}
	msg := s.Send(t, http.MethodPut, "/v1/bloomfilter/f", `{"owner":"0d7c5d2a-54a0-4c4e-8a37-6a1f2f1f0b9e","failIfExists":true}`).
		WantError(t, http.StatusConflict, wire.CodeFilterExists)
	if msg != `filter "f" exists with other owner; overwrite: true replaces it, empty` {
		t.Errorf("failIfExists with another owner: %q", msg)
	}

	var unowned map[string]any
	s.Send(t, http.MethodPut, "/v1/bloomfilter/g", `{}`).WantJSON(t, http.StatusCreated, &unowned)
	if _, ok := unowned["owner"]; ok {
		t.Errorf("a filter created without an owner answered one: %v", unowned)
	}
	for body, want := range map[string]string{
		`{"owner":"tenant-a"}`:                             `invalid parameter: "owner". must be a UUID other than the nil one, got "tenant-a"`,
		`{"owner":"00000000-0000-0000-0000-000000000000"}`: `invalid parameter: "owner". must be a UUID other than the nil one, got "00000000-0000-0000-0000-000000000000"`,
		`{"owner":7}`: `invalid parameter: "owner". expect string type`,
	} {
		if msg := s.Send(t, http.MethodPut, "/v1/bloomfilter/h", body).WantError(t, http.StatusBadRequest, wire.CodeBadParameter); msg != want {
			t.Errorf("PUT %s: %q, want %q", body, msg, want)
		}
	}
}

// A delete that names an owner takes only the filter that owner made.
func TestDeleteOfAnOwnersFilter(t *testing.T) {
	t.Parallel()
	s := dataplane.Handlers(t, nil)
	const owner, other = "37e7e58f-edbd-4441-9d81-b2b3bc8ae93c", "0d7c5d2a-54a0-4c4e-8a37-6a1f2f1f0b9e"
	s.Send(t, http.MethodPut, "/v1/bloomfilter/mine", `{"owner":"`+owner+`"}`).WantJSON(t, http.StatusCreated, new(wire.Filter))
	s.Send(t, http.MethodPut, "/v1/bloomfilter/theirs", `{"owner":"`+other+`"}`).WantJSON(t, http.StatusCreated, new(wire.Filter))
	s.Send(t, http.MethodPut, "/v1/bloomfilter/nobodys", `{}`).WantJSON(t, http.StatusCreated, new(wire.Filter))

	for name, want := range map[string]string{
		"theirs":  `filter "theirs" was made by owner ` + other + `, not by ` + owner + `; it is left`,
		"nobodys": `filter "nobodys" was made without an owner, not by ` + owner + `; it is left`,
	} {
		err := s.Client.DeleteOwned(t.Context(), name, owner)
		if e, ok := errors.AsType[*client.Error](err); !ok || !client.IsOtherOwner(err) || e.Status != http.StatusConflict || e.Message != want {
			t.Errorf("DeleteOwned(%s): %v, want 409 %q", name, err, want)
		}
		dataplane.Get(t, s, name) // still there
	}
	if err := s.Client.DeleteOwned(t.Context(), "mine", owner); err != nil {
		t.Fatalf("DeleteOwned(mine): %v", err)
	}
	if _, err := s.Client.Get(t.Context(), "mine"); !client.IsNotFound(err) {
		t.Errorf("after DeleteOwned: %v, want not found", err)
	}
	if err := s.Client.DeleteOwned(t.Context(), "absent", owner); !client.IsNotFound(err) {
		t.Errorf("DeleteOwned of a filter the pod lacks: %v, want not found", err)
	}
	s.Send(t, http.MethodDelete, "/v1/bloomfilter/theirs?owner=tenant-a", "").WantError(t, http.StatusBadRequest, wire.CodeBadParameter)
}

var timeFormat = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)

// parseTime checks the wire format of created and expiration: UTC with milliseconds.
func parseTime(t *testing.T, field, s string) time.Time {
	t.Helper()
	if !timeFormat.MatchString(s) {
		t.Fatalf("%s = %q, want the form 2006-01-02T15:04:05.000Z", field, s)
	}
	ts, err := time.Parse("2006-01-02T15:04:05.000Z", s)
	if err != nil {
		t.Fatalf("%s = %q: %v", field, s, err)
	}
	return ts
}

func TestFilterJSON(t *testing.T) {
	t.Parallel()
	s := dataplane.Handlers(t, nil)
	ctx := t.Context()

	before := time.Now().UTC().Truncate(time.Millisecond)
	dataplane.Create(t, s, "f", client.CreateOptions{ExpectedInsertions: new(uint64(1000)), FPP: new(0.01),
		ValidPeriodAfterCreate: new(int64(3600))})
	after := time.Now().UTC()
	for i := range 10 {
		if err := s.Client.Set(ctx, "f", fmt.Sprint("value-", i)); err != nil {
			t.Fatalf("Set: %v", err)
		}
	}

	r := s.Send(t, http.MethodGet, "/v1/bloomfilter/f", "")
	var raw map[string]any
	r.WantJSON(t, http.StatusOK, &raw)
	if _, ok := raw["validPeriodAfterAccess"]; ok {
		t.Errorf("GET %s has validPeriodAfterAccess, want it absent without sliding expiry", r.Body)
	}
	var f wire.Filter
	r.WantJSON(t, http.StatusOK, &f)
	created := parseTime(t, "created", f.Created)
	if created.Before(before) || created.After(after) {
		t.Errorf("created = %s, want between %s and %s", created, before, after)
	}
	if expiration := parseTime(t, "expiration", f.Expiration); expiration.Sub(created) != time.Hour {
		t.Errorf("expiration - created = %s, want validPeriodAfterCreate 1h", expiration.Sub(created))
	}
	if f.Name != "f" || f.ExpectedInsertions != 1000 || f.FPP != 0.01 || !f.Scalable || f.Growth != 2 || f.Tightening != 0.5 {
		t.Errorf("filter = %+v, want f, 1000, 0.01, scalable with growth 2 and tightening 0.5", f)
	}
	if f.Items != 10 || f.Layers != 1 || f.Hashes == 0 || f.Bits == 0 || f.SizeBytes != (f.Bits+63)/64*8 {
		t.Errorf("filter = %+v, want 10 items, 1 layer, hashes, bits, and sizeBytes the bits in 64-bit words", f)
	}
	if !(f.FillRatio > 0 && f.FillRatio < 0.1) || !(f.EstimatedFPP > 0 && f.EstimatedFPP < f.FPP) {
		t.Errorf("fillRatio %v, estimatedFpp %v; want a little filled, and a rate below fpp", f.FillRatio, f.EstimatedFPP)
	}

	// An empty filter's rates are plain zeros, not -0.
	empty := s.Send(t, http.MethodPut, "/v1/bloomfilter/empty", `{}`)
	if !strings.Contains(string(empty.Body), `"estimatedFpp":0}`) || !strings.Contains(string(empty.Body), `"fillRatio":0,`) {
		t.Errorf("empty filter = %s, want fillRatio and estimatedFpp 0", empty.Body)
	}

	// The other kinds of expiry and shape.
	tests := []struct {
		name, body string
		check      func(t *testing.T, raw map[string]any, f wire.Filter)
	}{
		{"sliding", `{"validPeriodAfterAccess":30}`, func(t *testing.T, raw map[string]any, f wire.Filter) {
			t.Helper()
			if raw["validPeriodAfterAccess"] != 30.0 {
				t.Errorf("validPeriodAfterAccess = %v, want 30 (seconds)", raw["validPeriodAfterAccess"])
			}
			// Nothing accessed it yet: it expires 30 s after creation.
			if d := parseTime(t, "expiration", f.Expiration).Sub(parseTime(t, "created", f.Created)); d != 30*time.Second {
				t.Errorf("expiration - created = %s, want 30s", d)
			}
		}},
		{"never", `{"validPeriodAfterCreate":0}`, func(t *testing.T, raw map[string]any, _ wire.Filter) {
			t.Helper()
			if _, ok := raw["expiration"]; ok {
				t.Errorf("a filter without expiry has expiration %v, want none", raw["expiration"])
			}
		}},
		{"alias", `{"validPeriod":60}`, func(t *testing.T, _ map[string]any, f wire.Filter) {
			t.Helper()
			if d := parseTime(t, "expiration", f.Expiration).Sub(parseTime(t, "created", f.Created)); d != time.Minute {
				t.Errorf("validPeriod 60: expiration - created = %s, want 1m", d)
			}
		}},
		{"fixed", `{"scalable":false,"expectedInsertions":100}`, func(t *testing.T, raw map[string]any, f wire.Filter) {
			t.Helper()
			_, hasGrowth := raw["growth"]
			_, hasTightening := raw["tightening"]
			if f.Scalable || hasGrowth || hasTightening || f.ExpectedInsertions != 100 {
				t.Errorf("fixed filter = %v, want scalable false, no growth or tightening", raw)
			}
		}},
		{"integral floats", `{"expectedInsertions":1e3,"growth":4.0}`, func(t *testing.T, _ map[string]any, f wire.Filter) {
			t.Helper()
			if f.ExpectedInsertions != 1000 || f.Growth != 4 {
				t.Errorf("1e3 and 4.0 read as %d and %d, want 1000 and 4", f.ExpectedInsertions, f.Growth)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := "/v1/bloomfilter/" + strings.ReplaceAll(tt.name, " ", "-")
			var f wire.Filter
			s.Send(t, http.MethodPut, path, tt.body).WantJSON(t, http.StatusCreated, &f)
			r := s.Send(t, http.MethodGet, path, "")
			var raw map[string]any
			r.WantJSON(t, http.StatusOK, &raw)
			r.WantJSON(t, http.StatusOK, &f)
			tt.check(t, raw, f)
		})
	}
}

func TestEmptyCreateBodyUsesConfiguredDefaults(t *testing.T) {
	t.Parallel()
	s := dataplane.Handlers(t, func(cfg *config.Config) {
		cfg.DefaultExpectedInsertions = 5000
		cfg.DefaultFPP = 0.02
		cfg.DefaultValidAfterCreate = 2 * time.Hour
	})
	for i, body := range []string{"", "{}", " \n\t "} {
		var f wire.Filter
		s.Send(t, http.MethodPut, fmt.Sprint("/v1/bloomfilter/f", i), body).WantJSON(t, http.StatusCreated, &f)
		d := parseTime(t, "expiration", f.Expiration).Sub(parseTime(t, "created", f.Created))
		if f.ExpectedInsertions != 5000 || f.FPP != 0.02 || d != 2*time.Hour || !f.Scalable || f.ValidPeriodAfterAccess != 0 {
			t.Errorf("PUT with body %q = %+v (expires after %s), want 5000, 0.02, 2h, scalable", body, f, d)
		}
	}
}

func TestListAndDelete(t *testing.T) {
	t.Parallel()
	s := dataplane.Handlers(t, nil)
	ctx := t.Context()

	r := s.Send(t, http.MethodGet, "/v1/bloomfilter/list", "")
	if r.Status != http.StatusOK || strings.TrimSpace(string(r.Body)) != "[]" {
		t.Fatalf("list of no filters = %d %s, want 200 []", r.Status, r.Body)
	}
	names := []string{"delta", "Alpha", "charlie", "bravo", "a.b", "a-b", "a_b", "0"}
	for _, name := range names {
		dataplane.Create(t, s, name, client.CreateOptions{ExpectedInsertions: new(uint64(100))})
	}
	var listed []string
	s.Send(t, http.MethodGet, "/v1/bloomfilter/list", "").WantJSON(t, http.StatusOK, &listed)
	want := slices.Sorted(slices.Values(names))
	if !slices.Equal(listed, want) {
		t.Fatalf("list = %q, want %q", listed, want)
	}

	if err := s.Client.Set(ctx, "bravo", "v"); err != nil {
		t.Fatalf("Set: %v", err)
	}
	for range 2 { // the second delete finds nothing and still succeeds
		r := s.Send(t, http.MethodDelete, "/v1/bloomfilter/bravo", "")
		if r.Status != http.StatusOK {
			t.Fatalf("DELETE = %d %s, want 200", r.Status, r.Body)
		}
	}
	s.Send(t, http.MethodGet, "/v1/bloomfilter/bravo", "").WantError(t, http.StatusNotFound, wire.CodeFilterNotFound)
	if got, _ := s.Client.List(ctx); slices.Contains(got, "bravo") || len(got) != len(names)-1 {
		t.Errorf("list after delete = %q, want every name but bravo", got)
	}
	// A filter created again under the deleted name starts empty.
	dataplane.Create(t, s, "bravo", client.CreateOptions{ExpectedInsertions: new(uint64(100))})
	if present, err := s.Client.Check(ctx, "bravo", "v"); err != nil || present {
		t.Errorf("Check on the re-created filter = %v, %v; want false", present, err)
	}
}

func TestValueEndpoints(t *testing.T) {
	t.Parallel()
	s := dataplane.Handlers(t, nil)
	dataplane.Create(t, s, "f", client.CreateOptions{ExpectedInsertions: new(uint64(1000)), FPP: new(1e-6)})

	steps := []struct {
		path, body string
		status     int
		want       string // the JSON answer; empty for none
	}{
		{"check", `{"value":"a"}`, 200, `false`},
		{"check-and-set", `{"value":"a"}`, 200, `false`},
		{"check-and-set", `{"value":"a"}`, 200, `true`},
		{"check", `{"value":"a"}`, 200, `true`},
		{"multi-check", `{"values":["a","b"]}`, 200, `[true,false]`},
		{"multi-check-and-set", `{"values":["b","a","c"]}`, 200, `[false,true,false]`},
		{"multi-check", `{"values":["a","b","c","d"]}`, 200, `[true,true,true,false]`},
		{"set", `{"value":"d"}`, 200, ``},
		{"set", `{"value":"d"}`, 200, ``}, // setting a present value is fine
		{"multi-set", `{"values":["e","f"]}`, 200, ``},
		{"multi-check", `{"values":["d","e","f","g"]}`, 200, `[true,true,true,false]`},
		{"multi-check", `{"values":[]}`, 200, `[]`},
		{"multi-check-and-set", `{"values":[]}`, 200, `[]`},
		{"multi-set", `{"values":[]}`, 200, ``},
	}
	for _, step := range steps {
		r := s.Send(t, http.MethodPost, "/v1/bloomfilter/f/"+step.path, step.body)
		if r.Status != step.status || strings.TrimSpace(string(r.Body)) != step.want {
			t.Fatalf("POST %s %s = %d %q, want %d %q", step.path, step.body, r.Status, r.Body, step.status, step.want)
		}
		if step.want != "" && !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			t.Errorf("POST %s: Content-Type %q, want application/json", step.path, r.Header.Get("Content-Type"))
		}
	}
	if f := dataplane.Get(t, s, "f"); f.Items != 6 {
		t.Errorf("items = %d, want 6 (a b c d e f)", f.Items)
	}
}

// A validation failure answers 400 with filter-service's message (or ours, naming the field and
// what it expects) and changes nothing.
func TestValidationMessages(t *testing.T) {
	t.Parallel()
	s := dataplane.Handlers(t, nil)
	ctx := t.Context()
	dataplane.Create(t, s, "f", client.CreateOptions{ExpectedInsertions: new(uint64(1000)), FPP: new(1e-6)})
	if err := s.Client.Set(ctx, "f", "kept"); err != nil {
		t.Fatalf("Set: %v", err)
	}

	type tc struct {
		body string
		want string   // the exact message, where filter-service or the design fixes it
		has  []string // otherwise, what the message must name
	}
	createCases := []tc{
		{body: `{"fpp":1.5}`, want: `invalid parameter: "fpp". expected: > 0 && < 1, actual: 1.5`},
		{body: `{"fpp":1}`, want: `invalid parameter: "fpp". expected: > 0 && < 1, actual: 1`},
		{body: `{"fpp":0}`, want: `invalid parameter: "fpp". expected: > 0 && < 1, actual: 0`},
		{body: `{"fpp":-0.1}`, want: `invalid parameter: "fpp". expected: > 0 && < 1, actual: -0.1`},
		{body: `{"fpp":"0.01"}`, has: []string{`"fpp"`, "number", "string"}},
		{body: `{"expectedInsertions":"1000"}`, has: []string{`invalid parameter: "expectedInsertions"`, "integer", "string"}},
		{body: `{"expectedInsertions":1000.5}`, has: []string{`"expectedInsertions"`, "integer", "1000.5"}},
		{body: `{"expectedInsertions":true}`, has: []string{`"expectedInsertions"`, "integer", "boolean"}},
		{body: `{"expectedInsertions":[1000]}`, has: []string{`"expectedInsertions"`, "integer", "array"}},
		{body: `{"expectedInsertions":0}`, has: []string{`"expectedInsertions"`, "> 0", "actual: 0"}},
		{body: `{"expectedInsertions":-5}`, has: []string{`"expectedInsertions"`, "> 0", "actual: -5"}},
		{body: `{"expectedInsertions":18446744073709551616}`, has: []string{`"expectedInsertions"`, "18446744073709551616"}},
		{body: `{"expectedInsertions":1e400}`, has: []string{`"expectedInsertions"`, "> 0 && <=", "actual: 1e400"}},
		// Within the integer range, but no machine holds the bits.
		{body: `{"expectedInsertions":9007199254740992}`, has: []string{`"expectedInsertions"`, "too large"}},
		{body: `{"fpp":1e-300,"expectedInsertions":1000000000}`, has: []string{`"expectedInsertions"`, "too large"}},
		{body: `{"overwrite":"true"}`, has: []string{`"overwrite"`, "boolean", "string"}},
		{body: `{"overwrite":1}`, has: []string{`"overwrite"`, "boolean", "number"}},
		{body: `{"scalable":"false"}`, has: []string{`"scalable"`, "boolean", "string"}},
		{body: `{"scalable":0}`, has: []string{`"scalable"`, "boolean", "number"}},
		{body: `{"validPeriodAfterCreate":"60"}`, has: []string{`"validPeriodAfterCreate"`, "integer", "string"}},
		{body: `{"validPeriodAfterCreate":-1}`, has: []string{`"validPeriodAfterCreate"`, ">= 0", "-1"}},
		{body: `{"validPeriodAfterCreate":1.5}`, has: []string{`"validPeriodAfterCreate"`, "integer"}},
		{body: `{"validPeriodAfterCreate":true}`, has: []string{`"validPeriodAfterCreate"`, "integer", "boolean"}},
		{body: `{"validPeriodAfterCreate":1e30}`, has: []string{`"validPeriodAfterCreate"`, "1e30"}},
		{body: `{"validPeriod":"60"}`, has: []string{`"validPeriod"`, "integer", "string"}},
		{body: `{"validPeriodAfterAccess":"60"}`, has: []string{`"validPeriodAfterAccess"`, "integer", "string"}},
		{body: `{"validPeriodAfterAccess":-1}`, has: []string{`"validPeriodAfterAccess"`, ">= 0", "-1"}},
		{body: `{"validPeriodAfterAccess":0}`, want: `invalid parameter: "validPeriodAfterAccess". must be greater than 0; leave it out for no expiry after access`},
		{body: `{"validPeriod":60,"validPeriodAfterCreate":60}`, has: []string{`"validPeriod"`, `"validPeriodAfterCreate"`}},
		{body: `{"growth":0}`, has: []string{`"growth"`, "actual: 0"}},
		{body: `{"growth":17}`, has: []string{`"growth"`, "16", "actual: 17"}},
		{body: `{"tightening":1}`, want: `invalid parameter: "tightening". expected: > 0 && < 1, actual: 1`},
		{body: `{"expectedinsertions":1000}`, want: `unknown parameter: "expectedinsertions"; did you mean "expectedInsertions"?`},
		{body: `{"capacity":1000}`, want: `unknown parameter: "capacity"; did you mean "expectedInsertions"?`},
		{body: `{"errorRate":0.01}`, want: `unknown parameter: "errorRate"; did you mean "fpp"?`},
		{body: `{"name":"f2"}`, want: `unknown parameter: "name"`},
		{body: `{`, has: []string{"invalid JSON"}},
		{body: `{"fpp":0.01}{"fpp":0.02}`, has: []string{"invalid JSON"}},
		{body: `[]`, has: []string{"invalid JSON", "object"}},
		{body: `[{"fpp":0.01}]`, has: []string{"invalid JSON", "object"}},
		{body: `"f"`, has: []string{"invalid JSON", "object"}},
		{body: `null`, has: []string{"invalid JSON", "object"}},
	}
	singleCases := []tc{
		{body: ``, want: `required parameter: "value"`},
		{body: `{}`, want: `required parameter: "value"`},
		{body: `{"value":null}`, want: `required parameter: "value"`},
		{body: `{"value":1}`, want: `invalid parameter: "value". expect string type`},
		{body: `{"value":true}`, want: `invalid parameter: "value". expect string type`},
		{body: `{"value":["a"]}`, want: `invalid parameter: "value". expect string type`},
		{body: `{"value":{"a":1}}`, want: `invalid parameter: "value". expect string type`},
		{body: `{"value":"new","other":1}`, want: `unknown parameter: "other"`},
		{body: `{"values":["new"]}`, want: `unknown parameter: "values"; did you mean "value"?`},
		{body: `{"value":"new"`, has: []string{"invalid JSON"}},
		{body: `["new"]`, has: []string{"invalid JSON", "object"}},
	}
	batchCases := []tc{
		{body: ``, want: `required parameter: "values"`},
		{body: `{}`, want: `required parameter: "values"`},
		{body: `{"values":null}`, want: `required parameter: "values"`},
		{body: `{"values":"new"}`, want: `invalid parameter: "values". expect Json array`},
		{body: `{"values":{"a":"new"}}`, want: `invalid parameter: "values". expect Json array`},
		{body: `{"values":1}`, want: `invalid parameter: "values". expect Json array`},
		{body: `{"values":["new"],"other":1}`, want: `unknown parameter: "other"`},
		{body: `{"value":"new"}`, want: `unknown parameter: "value"; did you mean "values"?`},
		{body: `{"values":["new"]`, has: []string{"invalid JSON"}},
		{body: `["new"]`, has: []string{"invalid JSON", "object"}},
	}

	type endpoint struct {
		method, path string
		cases        []tc
	}
	endpoints := []endpoint{
		{http.MethodPut, "/v1/bloomfilter/new", createCases},
		{http.MethodPut, "/v1/bloomfilter/f", []tc{ // a bad overwrite leaves the filter alone
			{body: `{"overwrite":true,"fpp":2}`, want: `invalid parameter: "fpp". expected: > 0 && < 1, actual: 2`},
			{body: `{"overwrite":true,"unknown":2}`, want: `unknown parameter: "unknown"`},
		}},
	}
	for _, p := range []string{"check", "check-and-set", "set"} {
		endpoints = append(endpoints, endpoint{http.MethodPost, "/v1/bloomfilter/f/" + p, singleCases})
	}
	for _, p := range []string{"multi-check", "multi-check-and-set", "multi-set"} {
		endpoints = append(endpoints, endpoint{http.MethodPost, "/v1/bloomfilter/f/" + p, batchCases})
	}
	for _, ep := range endpoints {
		for _, tt := range ep.cases {
			t.Run(ep.method+" "+ep.path+" "+tt.body, func(t *testing.T) {
				msg := s.Send(t, ep.method, ep.path, tt.body).WantError(t, http.StatusBadRequest, wire.CodeBadParameter)
				if tt.want != "" && msg != tt.want {
					t.Errorf("message = %q, want %q", msg, tt.want)
				}
				for _, part := range tt.has {
					if !strings.Contains(msg, part) {
						t.Errorf("message = %q, want it to contain %q", msg, part)
					}
				}
			})
		}
	}

	// Nothing changed: no filter was created, f still holds exactly what it held.
	if names, err := s.Client.List(ctx); err != nil || !slices.Equal(names, []string{"f"}) {
		t.Errorf("list = %q, %v; want only f", names, err)
	}
	if f := dataplane.Get(t, s, "f"); f.Items != 1 || f.FPP != 1e-6 {
		t.Errorf("f = %+v, want 1 item and fpp 1e-6 as created", f)
	}
	if got := dataplane.MultiCheck(t, s, "f", []string{"kept", "new"}); !slices.Equal(got, []bool{true, false}) {
		t.Errorf("check kept, new = %v, want [true false]", got)
	}
}

// Messages are written as they read: `>` and `&` are not HTML-escaped to \u003e and \u0026.
func TestErrorBodyIsNotHTMLEscaped(t *testing.T) {
	t.Parallel()
	s := dataplane.Handlers(t, nil)
	r := s.Send(t, http.MethodPut, "/v1/bloomfilter/f", `{"fpp":1.5}`)
	r.WantError(t, http.StatusBadRequest, wire.CodeBadParameter)
	if want := `expected: > 0 && < 1, actual: 1.5`; !bytes.Contains(r.Body, []byte(want)) {
		t.Errorf("body = %s, want it to contain %s literally", r.Body, want)
	}
}

// The body is validated before the filter is looked up: a bad body is a 400 whether or not the
// filter exists, and only a good body on a missing filter is a 404.
func TestBodyValidatedBeforeLookup(t *testing.T) {
	t.Parallel()
	s := dataplane.Handlers(t, nil)
	tests := []struct{ path, bad, good string }{
		{"check", `{"value":1}`, `{"value":"a"}`},
		{"check-and-set", `{}`, `{"value":"a"}`},
		{"set", `{"value":"a","x":1}`, `{"value":"a"}`},
		{"multi-check", `{"values":"a"}`, `{"values":["a"]}`},
		{"multi-check-and-set", `{"values":["a",1]}`, `{"values":["a","1"]}`},
		{"multi-set", `{"values":{}}`, `{"values":[]}`},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			path := "/v1/bloomfilter/missing/" + tt.path
			s.Send(t, http.MethodPost, path, tt.bad).WantError(t, http.StatusBadRequest, wire.CodeBadParameter)
			msg := s.Send(t, http.MethodPost, path, tt.good).WantError(t, http.StatusNotFound, wire.CodeFilterNotFound)
			if !strings.Contains(msg, `"missing"`) {
				t.Errorf("message %q should name the filter", msg)
			}
		})
	}
	s.Send(t, http.MethodGet, "/v1/bloomfilter/missing", "").WantError(t, http.StatusNotFound, wire.CodeFilterNotFound)
}

func TestFilterNames(t *testing.T) {
	t.Parallel()
	s := dataplane.Handlers(t, nil)
	longest := strings.Repeat("n", 253)

	valid := []string{longest, "A-z_0.9", "x", "user:123"}
	for _, name := range valid {
		r := s.Send(t, http.MethodPut, "/v1/bloomfilter/"+name, `{"expectedInsertions":10}`)
		if r.Status != http.StatusCreated {
			t.Fatalf("PUT a valid name of %d characters = %d %s, want 201", len(name), r.Status, r.Body)
		}
		s.Send(t, http.MethodPost, "/v1/bloomfilter/"+name+"/check", `{"value":"v"}`).WantJSON(t, http.StatusOK, new(bool))
	}

	invalid := []struct{ what, path string }{
		{"space", "a%20b"},
		{"escaped slash", "a%2Fb"},
		{"254 characters", strings.Repeat("n", 254)},
		{"unicode", "%C3%A9t%C3%A9"},
		{"CJK", "%E6%97%A5%E6%9C%AC"},
		{"star", "a*b"},
		{"percent", "a%25b"},
		{"dot", "%2E"},
		{"dot dot", "%2E%2E"},
	}
	for _, tt := range invalid {
		for _, req := range []struct{ method, suffix, body string }{
			{http.MethodPut, "", `{}`},
			{http.MethodGet, "", ``},
			{http.MethodDelete, "", ``},
			{http.MethodPost, "/check", `{"value":"v"}`},
			{http.MethodPost, "/multi-set", `{"values":["v"]}`},
		} {
			t.Run(tt.what+" "+req.method+req.suffix, func(t *testing.T) {
				msg := s.Send(t, req.method, "/v1/bloomfilter/"+tt.path+req.suffix, req.body).
					WantError(t, http.StatusBadRequest, wire.CodeBadParameter)
				if !strings.HasPrefix(msg, `invalid parameter: "name".`) {
					t.Errorf("message = %q, want it to start with invalid parameter: \"name\".", msg)
				}
			})
		}
	}
	// A name with a slash says why it cannot be one.
	if msg := s.Send(t, http.MethodPut, "/v1/bloomfilter/a%2Fb", `{}`).WantError(t, http.StatusBadRequest, wire.CodeBadParameter); !strings.Contains(msg, "contains '/': a name is one segment of the path") {
		t.Errorf("a name with a slash: %q", msg)
	}
	// "list" is reserved: GET lists, and the other methods refuse the name instead of 405.
	for _, req := range []struct{ method, path, body string }{
		{http.MethodPut, "/v1/bloomfilter/list", `{}`},
		{http.MethodDelete, "/v1/bloomfilter/list", ``},
		{http.MethodPost, "/v1/bloomfilter/list/check", `{"value":"v"}`},
	} {
		msg := s.Send(t, req.method, req.path, req.body).WantError(t, http.StatusBadRequest, wire.CodeBadParameter)
		if !strings.Contains(msg, `"list"`) {
			t.Errorf("%s %s: message = %q, want it to name \"list\"", req.method, req.path, msg)
		}
	}

	// Percent-encoded letters are the letters: %61bc is abc.
	s.Send(t, http.MethodPut, "/v1/bloomfilter/%61bc", `{}`).WantJSON(t, http.StatusCreated, new(wire.Filter))
	if r := s.Send(t, http.MethodPost, "/v1/bloomfilter/abc/set", `{"value":"v"}`); r.Status != http.StatusOK {
		t.Fatalf("set through /abc = %d %s", r.Status, r.Body)
	}
	var present bool
	s.Send(t, http.MethodPost, "/v1/bloomfilter/ab%63/check", `{"value":"v"}`).WantJSON(t, http.StatusOK, &present)
	if !present {
		t.Error("a value set through /abc was not found through /ab%63")
	}
	if r := s.Send(t, http.MethodDelete, "/v1/bloomfilter/%61bc", ""); r.Status != http.StatusOK {
		t.Fatalf("delete through /%%61bc = %d %s", r.Status, r.Body)
	}

	names, err := s.Client.List(t.Context())
	if want := slices.Sorted(slices.Values(valid)); err != nil || !slices.Equal(names, want) {
		t.Errorf("list = %d names (%v), want exactly the %d valid ones", len(names), err, len(want))
	}
}

func TestUnicodeAndEmptyValues(t *testing.T) {
	t.Parallel()
	s := dataplane.Handlers(t, nil)
	dataplane.Create(t, s, "f", client.CreateOptions{ExpectedInsertions: new(uint64(1000)), FPP: new(1e-9)})

	values := []string{
		"",              // empty string
		"😀",             // emoji, outside the BMP (a surrogate pair when escaped)
		"👩‍👩‍👧",         // emoji joined by zero-width joiners
		"日本語",           // CJK
		"é",             // precomposed U+00E9
		"e\u0301",       // e + combining acute accent: looks the same, is another string
		"\u0000",        // NUL
		"a\nb\t\"c\\",   // characters JSON escapes
		"<script>&amp;", // characters HTML escaping would touch
	}
	got, err := s.Client.MultiCheckAndSet(t.Context(), "f", values)
	if err != nil || !slices.Equal(got, make([]bool, len(values))) {
		t.Fatalf("MultiCheckAndSet of distinct strings = %v, %v; want all false", got, err)
	}
	for _, v := range values {
		if present, err := s.Client.CheckAndSet(t.Context(), "f", v); err != nil || !present {
			t.Errorf("CheckAndSet(%q) after insert = %v, %v; want true", v, present, err)
		}
	}
	// JSON escapes name the same strings as the raw UTF-8.
	escaped := `{"values":["\ud83d\ude00","\u65e5\u672c\u8a9e","\u00e9","e\u0301","","\u0000","\u00e8"]}`
	var answers []bool
	s.Send(t, http.MethodPost, "/v1/bloomfilter/f/multi-check", escaped).WantJSON(t, http.StatusOK, &answers)
	if want := []bool{true, true, true, true, true, true, false}; !slices.Equal(answers, want) {
		t.Errorf("multi-check of escaped forms = %v, want %v (è was never added)", answers, want)
	}
	if f := dataplane.Get(t, s, "f"); f.Items != uint64(len(values)) {
		t.Errorf("items = %d, want %d", f.Items, len(values))
	}
}

func TestDuplicatesWithinOneBatch(t *testing.T) {
	t.Parallel()
	s := dataplane.Handlers(t, nil)
	dataplane.Create(t, s, "f", client.CreateOptions{ExpectedInsertions: new(uint64(1000)), FPP: new(1e-9)})
	var got []bool
	s.Send(t, http.MethodPost, "/v1/bloomfilter/f/multi-check-and-set", `{"values":["a","b","a","c","b","a"]}`).
		WantJSON(t, http.StatusOK, &got)
	if want := []bool{false, false, true, false, true, true}; !slices.Equal(got, want) {
		t.Fatalf("multi-check-and-set with duplicates = %v, want %v", got, want)
	}
	if f := dataplane.Get(t, s, "f"); f.Items != 3 {
		t.Errorf("items = %d, want 3", f.Items)
	}
}

// An element of values that is not a string is a 400 naming its index, and nothing of the request
// is applied: filter-service answers false for it and adds nothing, which an application sending
// numeric IDs would never notice.
func TestNonStringValues(t *testing.T) {
	t.Parallel()
	s := dataplane.Handlers(t, nil)
	dataplane.Create(t, s, "f", client.CreateOptions{ExpectedInsertions: new(uint64(1000)), FPP: new(1e-9)})

	for body, want := range map[string]string{
		`{"values":["x","y",7]}`:         "element 2 is not a string but 7",
		`{"values":[null,"x"]}`:          "element 0 is not a string but null",
		`{"values":["x",{"a":"b"},"y"]}`: `element 1 is not a string but {"a":"b"}`,
		`{"values":["x",true]}`:          "element 1 is not a string but true",
		`{"values":["x",["y"]]}`:         `element 1 is not a string but ["y"]`,
	} {
		for _, path := range []string{"multi-check-and-set", "multi-check", "multi-set"} {
			msg := s.Send(t, http.MethodPost, "/v1/bloomfilter/f/"+path, body).WantError(t, http.StatusBadRequest, wire.CodeBadParameter)
			if !strings.Contains(msg, want) || !strings.Contains(msg, `send the number 12345 as "12345"`) {
				t.Errorf("%s %s: %q, want it to name %q and say what to send", path, body, msg, want)
			}
		}
	}
	if got := dataplane.MultiCheck(t, s, "f", []string{"x", "y", "7"}); !slices.Equal(got, []bool{false, false, false}) {
		t.Errorf("after refused requests the filter holds %v of x, y, 7; want none", got)
	}
}

// A filter with validPeriodAfterCreate is there until that period has passed, and absent from
// then on, at once, before any purge.
func TestExpiryAfterCreate(t *testing.T) {
	t.Parallel()
	tm := dataplane.NewTime()
	s := dataplane.HandlersAt(t, tm, nil)
	ctx := t.Context()
	f := dataplane.Create(t, s, "f", client.CreateOptions{ExpectedInsertions: new(uint64(100)), ValidPeriodAfterCreate: new(int64(1))})
	dataplane.Create(t, s, "stays", client.CreateOptions{ExpectedInsertions: new(uint64(100))})
	created, expiration := parseTime(t, "created", f.Created), parseTime(t, "expiration", f.Expiration)
	if d := expiration.Sub(created); d != time.Second {
		t.Fatalf("expiration - created = %s, want 1s", d)
	}
	if !created.Equal(tm.Clock.Now()) {
		t.Fatalf("created = %s, want the time of the create, %s", created, tm.Clock.Now())
	}

	tm.Clock.Advance(time.Second - time.Millisecond)
	if _, err := s.Client.Get(ctx, "f"); err != nil {
		t.Fatalf("Get a millisecond before the expiration: %v", err)
	}
	tm.Clock.Advance(time.Millisecond)
	_, err := s.Client.Get(ctx, "f")
	dataplane.WantAPIError(t, err, http.StatusNotFound, wire.CodeFilterNotFound)
	// Expired is absent for every endpoint, at once: this server runs no purge.
	_, err = s.Client.CheckAndSet(ctx, "f", "v")
	dataplane.WantAPIError(t, err, http.StatusNotFound, wire.CodeFilterNotFound)
	if names, err := s.Client.List(ctx); err != nil || !slices.Equal(names, []string{"stays"}) {
		t.Errorf("list after expiry = %q, %v; want [stays]", names, err)
	}
	// The name is free again.
	if _, created, err := s.Client.Create(ctx, "f", client.CreateOptions{}); err != nil || !created {
		t.Errorf("create after expiry = created %v, %v; want a new filter", created, err)
	}
}

// Sliding expiry: checks keep the filter alive; GET does not.
func TestExpiryAfterAccess(t *testing.T) {
	t.Parallel()
	const period = 3 * time.Second
	tm := dataplane.NewTime()
	s := dataplane.HandlersAt(t, tm, nil)
	ctx := t.Context()
	f := dataplane.Create(t, s, "f", client.CreateOptions{ExpectedInsertions: new(uint64(100)), ValidPeriodAfterAccess: new(int64(period / time.Second))})
	if f.ValidPeriodAfterAccess != int64(period/time.Second) {
		t.Fatalf("validPeriodAfterAccess = %d, want %d", f.ValidPeriodAfterAccess, period/time.Second)
	}
	if got, want := parseTime(t, "expiration", f.Expiration), tm.Clock.Now().Add(period); !got.Equal(want) {
		t.Fatalf("expiration = %s, want a period after the create, %s", got, want)
	}

	// Each check comes a millisecond before the filter would expire, five periods in all.
	for i := range 5 {
		tm.Clock.Advance(period - time.Millisecond)
		if _, err := s.Client.Check(ctx, "f", "v"); err != nil {
			t.Fatalf("check %d: %v; the checks should have kept the filter alive", i, err)
		}
	}
	lastCheck := tm.Clock.Now()
	f = dataplane.Get(t, s, "f")
	if got, want := parseTime(t, "expiration", f.Expiration), lastCheck.Add(period); !got.Equal(want) {
		t.Errorf("expiration after the checks = %s, want a period after the last, %s", got, want)
	}

	// A GET a millisecond before the expiration does not extend it.
	tm.Clock.Advance(period - time.Millisecond)
	dataplane.Get(t, s, "f")
	tm.Clock.Advance(time.Millisecond)
	_, err := s.Client.Get(ctx, "f")
	dataplane.WantAPIError(t, err, http.StatusNotFound, wire.CodeFilterNotFound)
}

// A body above maxHttpRequestLength is a 413, whether its length is announced or not, and the
// request does nothing.
func TestBodyTooLarge(t *testing.T) {
	t.Parallel()
	const limit = 1024
	s := dataplane.Handlers(t, func(cfg *config.Config) { cfg.MaxHTTPRequestLength = limit })
	ctx := t.Context()
	f := dataplane.Create(t, s, "f", client.CreateOptions{ExpectedInsertions: new(uint64(1000)), FPP: new(0.001)})
	if err := s.Client.Set(ctx, "f", "kept"); err != nil {
		t.Fatalf("Set: %v", err)
	}

	var many []string
	for i := range 200 {
		many = append(many, fmt.Sprint("value-", i))
	}
	manyJSON, _ := json.Marshal(map[string][]string{"values": many})
	bigValue := strings.Repeat("x", 2*limit)
	tests := []struct{ method, path, body string }{
		{http.MethodPut, "/v1/bloomfilter/f", `{"overwrite":true,"fpp":0.5` + strings.Repeat(" ", 2*limit) + `}`},
		{http.MethodPut, "/v1/bloomfilter/other", `{"fpp":0.5` + strings.Repeat(" ", 2*limit) + `}`},
		{http.MethodPost, "/v1/bloomfilter/f/multi-set", string(manyJSON)},
		{http.MethodPost, "/v1/bloomfilter/f/multi-check-and-set", string(manyJSON)},
		{http.MethodPost, "/v1/bloomfilter/f/check-and-set", `{"value":"` + bigValue + `"}`},
		{http.MethodPost, "/v1/bloomfilter/f/set", `{"value":"` + bigValue + `"}`},
	}
	for _, chunked := range []bool{false, true} {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("chunked=%v %s %s", chunked, tt.method, tt.path), func(t *testing.T) {
				send := s.Send
				if chunked {
					send = s.SendChunked
				}
				r := send(t, tt.method, tt.path, tt.body)
				cl, te := s.LastBody()
				if chunked && (cl != -1 || !slices.Equal(te, []string{"chunked"})) {
					t.Fatalf("the server saw Content-Length %d, Transfer-Encoding %q; want a chunked body", cl, te)
				}
				if !chunked && cl != int64(len(tt.body)) {
					t.Fatalf("the server saw Content-Length %d, want %d", cl, len(tt.body))
				}
				msg := r.WantError(t, http.StatusRequestEntityTooLarge, wire.CodeBodyTooLarge)
				if !strings.Contains(msg, "1024") {
					t.Errorf("message %q should name the limit", msg)
				}
			})
		}
	}

	after := dataplane.Get(t, s, "f")
	if after.Created != f.Created || after.FPP != 0.001 || after.Items != 1 {
		t.Errorf("f after refused requests = %+v, want it as created with 1 item", after)
	}
	if got := dataplane.MultiCheck(t, s, "f", append([]string{"kept"}, many[:20]...)); !slices.Equal(got, append([]bool{true}, make([]bool, 20)...)) {
		t.Errorf("check kept and the refused values = %v, want only kept", got)
	}
	if _, err := s.Client.Get(ctx, "other"); !client.IsNotFound(err) {
		t.Errorf("Get(other) = %v, want not found: a refused create creates nothing", err)
	}
	// A body just under the limit is served.
	if err := s.Client.Set(ctx, "f", strings.Repeat("y", limit-20)); err != nil {
		t.Errorf("Set of a body under the limit: %v", err)
	}
}

func TestMemoryLimits(t *testing.T) {
	t.Parallel()

	t.Run("per-filter limit refuses a create of too few partitions", func(t *testing.T) {
		t.Parallel()
		s := dataplane.Handlers(t, func(cfg *config.Config) { cfg.MaxFilterBytes = 64 << 10 })
		msg := s.Send(t, http.MethodPut, "/v1/bloomfilter/big", `{"expectedInsertions":1000000,"partitions":1}`).
			WantError(t, http.StatusBadRequest, wire.CodeBadParameter)
		if !strings.HasPrefix(msg, `invalid parameter: "expectedInsertions".`) || !strings.Contains(msg, "per-filter limit") {
			t.Errorf("message = %q, want it to name expectedInsertions and the per-filter limit", msg)
		}
		for body, want := range map[string]string{
			`{"partitions":0}`:    `invalid parameter: "partitions". expected: > 0 && <= 1024, actual: 0`,
			`{"partitions":1025}`: `invalid parameter: "partitions". expected: > 0 && <= 1024, actual: 1025`,
			`{"partitions":"2"}`:  `invalid parameter: "partitions"`,
		} {
			if msg := s.Send(t, http.MethodPut, "/v1/bloomfilter/big", body).WantError(t, http.StatusBadRequest, wire.CodeBadParameter); !strings.HasPrefix(msg, want) {
				t.Errorf("%s: %q, want it to start %q", body, msg, want)
			}
		}
		dataplane.Create(t, s, "small", client.CreateOptions{ExpectedInsertions: new(uint64(1000))})
		if names, _ := s.Client.List(t.Context()); !slices.Equal(names, []string{"small"}) {
			t.Errorf("list = %q, want [small]", names)
		}
	})

	// Left out, partitions are the fewest (a power of two) whose partition fits the limit; the
	// filter then holds about its capacity at its rate.
	t.Run("a create without partitions splits what the per-filter limit refuses whole", func(t *testing.T) {
		t.Parallel()
		s := dataplane.Handlers(t, func(cfg *config.Config) { cfg.MaxFilterBytes = 64 << 10 })
		small := dataplane.Create(t, s, "small", client.CreateOptions{ExpectedInsertions: new(uint64(1000))})
		big := dataplane.Create(t, s, "big", client.CreateOptions{ExpectedInsertions: new(uint64(150_000)), FPP: new(0.01)})
		if small.Partitions != 1 || big.Partitions != 4 || big.SizeBytes > 4*64<<10 || big.SizeBytes <= 3*64<<10 {
			t.Fatalf("partitions %d and %d taking %d bytes; want 1, and 4 of at most 64 KiB each", small.Partitions, big.Partitions, big.SizeBytes)
		}
		keys := make([]string, 140_000) // a partition that took more than its share would grow past the limit
		for i := range keys {
			keys[i] = "v" + strconv.Itoa(i)
		}
		if err := s.Client.MultiSet(t.Context(), "big", keys); err != nil {
			t.Fatal(err)
		}
		if got := dataplane.Get(t, s, "big"); got.Layers != 1 || got.Items < 139_000 || got.EstimatedFPP > 0.011 {
			t.Errorf("after its capacity: %d layers, %d items, estimated fpp %v; want 1 layer and the rate asked for", got.Layers, got.Items, got.EstimatedFPP)
		}
		if st, err := s.Internal.Client.FilterStatus(t.Context(), "big"); err != nil || st.Partitions != 4 {
			t.Errorf("status: %+v, %v; want 4 partitions", st, err)
		}
	})

	t.Run("filter count limit refuses another name", func(t *testing.T) {
		t.Parallel()
		s := dataplane.Handlers(t, func(cfg *config.Config) { cfg.MaxFilters = 1 })
		dataplane.Create(t, s, "one", client.CreateOptions{})
		_, _, err := s.Client.Create(t.Context(), "two", client.CreateOptions{})
		if e := dataplane.WantAPIError(t, err, http.StatusInsufficientStorage, wire.CodeInsufficientSpace); !strings.Contains(e.Message, "maxFilters") {
			t.Errorf("message %q should name maxFilters", e.Message)
		}
		if names, _ := s.Client.List(t.Context()); !slices.Equal(names, []string{"one"}) {
			t.Errorf("list = %q, want [one]", names)
		}
	})

	t.Run("total limit refuses the filter that does not fit", func(t *testing.T) {
		t.Parallel()
		opts := client.CreateOptions{ExpectedInsertions: new(uint64(10_000)), FPP: new(0.01)}
		s := dataplane.Handlers(t, func(cfg *config.Config) { cfg.MaxTotalBytes = 16 << 10 })
		ctx := t.Context()
		f := dataplane.Create(t, s, "one", opts)
		if f.SizeBytes > 16<<10 || 2*f.SizeBytes <= 16<<10 {
			t.Fatalf("the filter takes %d bytes; the test needs room for one and not two", f.SizeBytes)
		}
		_, _, err := s.Client.Create(ctx, "two", opts)
		e := dataplane.WantAPIError(t, err, http.StatusInsufficientStorage, wire.CodeInsufficientSpace)
		if !strings.Contains(e.Message, "total limit") {
			t.Errorf("message %q should name the total limit", e.Message)
		}
		// Deleting gives the memory back.
		if err := s.Client.Delete(ctx, "one"); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		dataplane.Create(t, s, "two", opts)
	})

	// A scalable filter of 100 at 1% has a first layer of 144 bytes and would add one of 312 bytes.
	for _, limit := range []struct {
		name      string
		configure func(*config.Config)
		message   string
	}{
		{"per-filter", func(cfg *config.Config) { cfg.MaxFilterBytes = 300 }, "per-filter limit"},
		{"total", func(cfg *config.Config) { cfg.MaxTotalBytes = 300 + filter.FilterOverhead }, "total limit"},
	} {
		t.Run(limit.name+" limit stops growth", func(t *testing.T) {
			t.Parallel()
			s := dataplane.Handlers(t, limit.configure)
			ctx := t.Context()
			f := dataplane.Create(t, s, "f", client.CreateOptions{ExpectedInsertions: new(uint64(100)), FPP: new(0.01)})
			if f.SizeBytes > 300 {
				t.Fatalf("the first layer takes %d bytes, more than the limit of 300 the test assumes", f.SizeBytes)
			}
			var added []string
			var err error
			for i := 0; err == nil && i < 1000; i++ {
				v := fmt.Sprint("value-", i)
				var present bool
				if present, err = s.Client.CheckAndSet(ctx, "f", v); err == nil && !present {
					added = append(added, v)
				}
			}
			e := dataplane.WantAPIError(t, err, http.StatusInsufficientStorage, wire.CodeInsufficientSpace)
			if !strings.Contains(e.Message, limit.message) {
				t.Errorf("message %q should name the %s", e.Message, limit.message)
			}
			// The first layer took exactly its capacity of new values; the next one needed a layer.
			if len(added) != 100 {
				t.Errorf("%d values were added before the refusal, want the first layer's capacity 100", len(added))
			}
			if got := dataplane.MultiCheck(t, s, "f", added); slices.Contains(got, false) {
				t.Errorf("values added before the refusal were lost: %v", got)
			}
			if f := dataplane.Get(t, s, "f"); f.Layers != 1 || f.Items != 100 {
				t.Errorf("filter = %+v, want 1 layer and 100 items", f)
			}
			// Values already present need no room.
			if present, err := s.Client.CheckAndSet(ctx, "f", added[0]); err != nil || !present {
				t.Errorf("CheckAndSet of a present value = %v, %v; want true", present, err)
			}
			_, err = s.Client.MultiCheckAndSet(ctx, "f", []string{added[1], "one-more-new-value"})
			dataplane.WantAPIError(t, err, http.StatusInsufficientStorage, wire.CodeInsufficientSpace)
		})
	}
}

// Many clients at once lose no update. Not parallel with other tests, so that its load does not
// stretch the timing of the expiry tests.
func TestConcurrentCheckAndSet(t *testing.T) {
	s := dataplane.Handlers(t, nil)
	ctx := t.Context()
	const clients, perClient = 8, 1000
	// At 1e-6 the chance that any of the 8000 answers is a false positive is below 1%, and that
	// more than 2 are is about 1e-7 (Poisson, mean < 0.008): the margin below admits those, and
	// nothing else.
	const falsePositiveMargin = 2
	dataplane.Create(t, s, "f", client.CreateOptions{ExpectedInsertions: new(uint64(clients * perClient)), FPP: new(1e-6)})

	values := make([][]string, clients)
	var all []string
	for c := range values {
		for i := range perClient {
			values[c] = append(values[c], fmt.Sprintf("client-%d-value-%d", c, i))
		}
		all = append(all, values[c]...)
	}
	round := func() (falses int64) {
		var n atomic.Int64
		var wg sync.WaitGroup
		for c := range clients {
			cl := client.New(s.URL)
			wg.Go(func() {
				for _, v := range values[c] {
					present, err := cl.CheckAndSet(ctx, "f", v)
					if err != nil {
						t.Errorf("CheckAndSet(%s): %v", v, err)
						return
					}
					if !present {
						n.Add(1)
					}
				}
			})
		}
		wg.Wait()
		return n.Load()
	}

	if falses := round(); falses > clients*perClient || falses < clients*perClient-falsePositiveMargin {
		t.Errorf("first round: %d values answered new, want %d (less at most %d false positives)",
			falses, clients*perClient, falsePositiveMargin)
	} else if f := dataplane.Get(t, s, "f"); f.Items != uint64(falses) {
		t.Errorf("items = %d, want %d, one for each value answered new", f.Items, falses)
	}
	if falses := round(); falses != 0 {
		t.Errorf("second round of the same values: %d answered new, want 0", falses)
	}
	if got := dataplane.MultiCheck(t, s, "f", all); slices.Contains(got, false) {
		t.Errorf("%d of %d values are missing after concurrent inserts", countFalse(got), len(all))
	}
}

// Clients racing to insert the same values: each value is new to exactly one of them.
func TestCheckAndSetIsLinearizable(t *testing.T) {
	s := dataplane.Handlers(t, nil)
	ctx := t.Context()
	const clients, values = 8, 500
	const falsePositiveMargin = 2 // as in TestConcurrentCheckAndSet
	dataplane.Create(t, s, "f", client.CreateOptions{ExpectedInsertions: new(uint64(values)), FPP: new(1e-6)})

	newTo := make([]atomic.Int32, values) // how many clients were told value i was new
	// Every client walks the values in the same order, so that they reach each value at about the
	// same time: the contention this test is about.
	order := rand.Perm(values)
	var wg sync.WaitGroup
	for c := range clients {
		cl := client.New(s.URL)
		wg.Go(func() {
			for _, i := range order {
				present, err := cl.CheckAndSet(ctx, "f", fmt.Sprint("shared-", i))
				if err != nil {
					t.Errorf("client %d: CheckAndSet: %v", c, err)
					return
				}
				if !present {
					newTo[i].Add(1)
				}
			}
		})
	}
	wg.Wait()
	unclaimed := 0
	for i := range newTo {
		switch n := newTo[i].Load(); {
		case n > 1:
			t.Errorf("value %d was new to %d clients, want exactly one", i, n)
		case n == 0:
			unclaimed++ // a false positive: it looked present before anyone added it
		}
	}
	if unclaimed > falsePositiveMargin {
		t.Errorf("%d values were new to no client, want at most %d false positives", unclaimed, falsePositiveMargin)
	}
}

func countFalse(bs []bool) (n int) {
	for _, b := range bs {
		if !b {
			n++
		}
	}
	return n
}

func TestNoSuchRoute(t *testing.T) {
	t.Parallel()
	s := dataplane.Handlers(t, nil)
	dataplane.Create(t, s, "f", client.CreateOptions{ExpectedInsertions: new(uint64(10))})
	tests := []struct {
		method, path string
		status       int
	}{
		{http.MethodGet, "/", http.StatusNotFound},
		{http.MethodGet, "/v1", http.StatusNotFound},
		{http.MethodGet, "/v1/nothing", http.StatusNotFound},
		{http.MethodGet, "/v2/bloomfilter/f", http.StatusNotFound},
		{http.MethodGet, "/v1/bloomfilter", http.StatusNotFound},
		{http.MethodGet, "/v1/bloomfilter/", http.StatusNotFound},
		{http.MethodPost, "/v1/bloomfilter/f/unknown", http.StatusNotFound},
		{http.MethodGet, "/v1/bloomfilter/f/check/more", http.StatusNotFound},
		{http.MethodPatch, "/v1/bloomfilter/f", http.StatusMethodNotAllowed},
		{http.MethodPost, "/v1/bloomfilter/f", http.StatusMethodNotAllowed},
		{http.MethodGet, "/v1/bloomfilter/f/check", http.StatusMethodNotAllowed},
		{http.MethodPut, "/v1/bloomfilter/f/multi-set", http.StatusMethodNotAllowed},
		{http.MethodPost, "/v1/bloomfilter/list", http.StatusMethodNotAllowed},
		{http.MethodPost, "/v1/ping", http.StatusMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			msg := s.Send(t, tt.method, tt.path, "").WantError(t, tt.status, wire.CodeNoSuchRoute)
			if !strings.Contains(msg, tt.method) || !strings.Contains(msg, tt.path) {
				t.Errorf("message %q should name the method and the path", msg)
			}
		})
	}
}

// A request that matched nothing, or left out what it needs, is told what it likely meant.
func TestErrorsSayWhatToDo(t *testing.T) {
	t.Parallel()
	s := dataplane.Handlers(t, nil)
	dataplane.Create(t, s, "users", client.CreateOptions{})
	for _, tc := range []struct {
		method, path, body string
		status, code       int
		want               string
	}{
		{http.MethodPut, "/v1/bloomfilter/other/", `{}`, http.StatusNotFound, wire.CodeNoSuchRoute, "paths take no trailing slash: /v1/bloomfilter/other"},
		{http.MethodPost, "/v1/bloomfilter/other", `{}`, http.StatusMethodNotAllowed, wire.CodeNoSuchRoute, "create a filter with PUT /v1/bloomfilter/other"},
		{http.MethodGet, "/v1/docs/", ``, http.StatusNotFound, wire.CodeNoSuchRoute, "start it with -d (--docs)"},
		{http.MethodPost, "/v1/bloomfilter/users/check?value=alice", ``, http.StatusBadRequest, wire.CodeBadParameter, `it goes in the JSON body ({"value": ...}), not in the query string`},
		{http.MethodPost, "/v1/bloomfilter/users/multi-set?values=a", `{}`, http.StatusBadRequest, wire.CodeBadParameter, `it goes in the JSON body ({"values": ...}), not in the query string`},
		{http.MethodPost, "/v1/bloomfilter/missing/check", `{"value":"v"}`, http.StatusNotFound, wire.CodeFilterNotFound, "create it with PUT /v1/bloomfilter/<name>"},
	} {
		msg := s.Send(t, tc.method, tc.path, tc.body).WantError(t, tc.status, tc.code)
		if !strings.Contains(msg, tc.want) {
			t.Errorf("%s %s: %q, want it to say %q", tc.method, tc.path, msg, tc.want)
		}
	}

	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL+"/v1/bloomfilter/users/set", strings.NewReader("\x1f\x8b compressed"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := s.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	msg := dataplane.Response{Status: resp.StatusCode, Header: resp.Header, Body: raw}.WantError(t, http.StatusUnsupportedMediaType, wire.CodeBadParameter)
	if !strings.Contains(msg, `Content-Encoding "gzip" is not supported: send the body uncompressed`) {
		t.Errorf("a gzip body: %q", msg)
	}
}
