package client_test

import (
	"fmt"
	"math"
	"net/http"
	"testing"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// The status agrees with the full description on everything but the fill ratio and rate, which it
// estimates, and it is read from its own endpoint.
func TestFilterStatus(t *testing.T) {
	d, c := startDataPlane(t, nil)
	ctx := t.Context()
	if _, _, err := c.Create(ctx, "grown", client.CreateOptions{ExpectedInsertions: new(uint64(100)), FPP: new(0.01)}); err != nil {
		t.Fatal(err)
	}
	values := make([]string, 1000) // ten times the capacity: several layers
	for i := range values {
		values[i] = fmt.Sprint("value-", i)
	}
	if err := c.MultiSet(ctx, "grown", values); err != nil {
		t.Fatal(err)
	}
	full, err := c.Get(ctx, "grown")
	if err != nil {
		t.Fatal(err)
	}

	operator := client.New(d.internal.URL, client.Internal(testToken))
	st, err := operator.FilterStatus(ctx, "grown")
	if err != nil {
		t.Fatal(err)
	}
	if req := d.internal.lastRequest(t); req.method != http.MethodGet || req.path != "/internal/v1/filters/grown/status" {
		t.Errorf("request %s %s, want GET /internal/v1/filters/grown/status", req.method, req.path)
	}
	want := full.Status()
	want.EstimatedFillRatio, want.EstimatedFPP = st.EstimatedFillRatio, st.EstimatedFPP
	if st != want || st.Layers < 2 {
		t.Errorf("status %+v\nwant     %+v, with several layers", st, want)
	}
	if diff := math.Abs(st.EstimatedFillRatio - full.FillRatio); diff > 0.01 {
		t.Errorf("estimated fill ratio %v, counted %v", st.EstimatedFillRatio, full.FillRatio)
	}
	if diff := math.Abs(st.EstimatedFPP - full.EstimatedFPP); !(diff <= 0.1*full.EstimatedFPP) {
		t.Errorf("estimated rate %v, from the counted bits %v", st.EstimatedFPP, full.EstimatedFPP)
	}

	_, err = operator.FilterStatus(ctx, "absent")
	apiError(t, err, http.StatusNotFound, wire.CodeFilterNotFound)
}
