package run_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bloomery/bloomery/dataplane/client"
	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/peer"
	"github.com/bloomery/bloomery/dataplane/persist"
	"github.com/bloomery/bloomery/dataplane/wire"
	"github.com/bloomery/bloomery/internal/await"
	"github.com/bloomery/bloomery/test/dataplane"
)

func TestMembershipEndpoint(t *testing.T) {
	s := dataplane.Handlers(t, nil)
	var m wire.Membership
	s.Internal.Send(t, http.MethodGet, wire.MembershipPath, "").WantJSON(t, http.StatusOK, &m)
	if m.Epoch != 0 || len(m.Members) != 0 {
		t.Fatalf("a pod never told: %+v, want epoch 0 and no members", m)
	}
	push := `{"epoch":3,"self":"a","members":[{"name":"a","url":"http://127.0.0.1:1"},{"name":"b","url":"http://127.0.0.1:2"}]}`
	s.Internal.Send(t, http.MethodPut, wire.MembershipPath, push).WantJSON(t, http.StatusOK, &m)
	if m.Epoch != 3 || m.Self != "a" || len(m.Members) != 2 {
		t.Fatalf("after a push: %+v", m)
	}
	older := `{"epoch":2,"self":"a","members":[{"name":"a","url":"http://127.0.0.1:1"}]}`
	msg := s.Internal.Send(t, http.MethodPut, wire.MembershipPath, older).WantError(t, http.StatusConflict, wire.CodeStaleEpoch)
	if !strings.Contains(msg, "holds epoch 3, got 2") {
		t.Errorf("stale epoch message: %q", msg)
	}
	if err := s.Internal.Client.SetMembership(t.Context(), wire.Membership{Epoch: 1}); !client.IsStaleEpoch(err) {
		t.Errorf("the client's SetMembership of an older epoch: %v, want IsStaleEpoch", err)
	}
	for body, want := range map[string]string{
		`{"epoch":4,"self":"c","members":[{"name":"a","url":"http://127.0.0.1:1"}]}`: `self: "c" is not one of the members`,
		`{"epoch":"4"}`:                      "invalid JSON body",
		`{"epoch":4,"members":[],"extra":1}`: `unknown field "extra"`,
		`{"epoch":4,"self":"a","members":[{"name":"a","url":"ftp://x"}]}`: `is not an http(s) URL`,
	} {
		if msg := s.Internal.Send(t, http.MethodPut, wire.MembershipPath, body).WantError(t, http.StatusBadRequest, wire.CodeBadParameter); !strings.Contains(msg, want) {
			t.Errorf("PUT %s: %q, want it to contain %q", body, msg, want)
		}
	}
}

func TestConsistencyParameterIsValidated(t *testing.T) {
	s := dataplane.Handlers(t, nil)
	dataplane.Create(t, s, "f", client.CreateOptions{})
	for _, path := range []string{"/v1/bloomfilter/f/check-and-set", "/v1/bloomfilter/f/check", "/v1/bloomfilter/f/set"} {
		msg := s.Send(t, http.MethodPost, path+"?consistency=most", `{"value":"x"}`).WantError(t, http.StatusBadRequest, wire.CodeBadParameter)
		if !strings.Contains(msg, `"consistency"`) || !strings.Contains(msg, `"most"`) {
			t.Errorf("%s: %q", path, msg)
		}
	}
	if present := dataplane.MultiCheck(t, s, "f", []string{"x"}); present[0] {
		t.Error("a write refused for its consistency parameter was applied")
	}
	// A pod without peers serves every level alone.
	cl := client.New(s.URL, client.WithConsistency(wire.ConsistencyAll))
	if present, err := cl.CheckAndSet(t.Context(), "f", "y"); err != nil || present {
		t.Fatalf("check-and-set with consistency=all on a pod alone = %v, %v", present, err)
	}
}

func TestApplyRefusesMalformedOps(t *testing.T) {
	s := dataplane.Handlers(t, nil)
	for body, want := range map[string]string{
		`{"ops":[{"op":"explode","name":"f","generation":1}]}`:          `unknown op "explode"`,
		`{"ops":[{"op":"create","name":"f","generation":1}]}`:           "without options",
		`{"ops":[{"op":"add","name":"no/slash","generation":1}]}`:       "invalid filter name",
		`{"ops":[{"op":"add","name":"f","generation":0,"keys":["a"]}]}`: "generation must be > 0",
		`{"ops":"nope"}`: "invalid JSON body",
	} {
		if msg := s.Internal.Send(t, http.MethodPost, "/internal/v1/apply", body).WantError(t, http.StatusBadRequest, wire.CodeBadParameter); !strings.Contains(msg, want) {
			t.Errorf("apply %s: %q, want it to contain %q", body, msg, want)
		}
	}
}

// Internal input that could not come from a peer or the operator is refused and changes nothing:
// a delete at the largest generation, which would leave a tombstone outliving every create, and
// epochs the operator could not count past.
func TestInternalInputThatCannotHurt(t *testing.T) {
	s := dataplane.Handlers(t, nil)
	dataplane.Create(t, s, "f", client.CreateOptions{})
	msg := s.Internal.Send(t, http.MethodPost, wire.ApplyPath, `{"ops":[{"op":"delete","name":"f","generation":9223372036854775807}]}`).
		WantError(t, http.StatusBadRequest, wire.CodeBadParameter)
	if !strings.Contains(msg, "generation 9223372036854775807 is more than 10m0s ahead") {
		t.Errorf("a delete far in the future: %q", msg)
	}
	if _, err := s.Client.Get(t.Context(), "f"); err != nil {
		t.Errorf("the filter after the refused delete: %v", err)
	}
	if _, _, err := s.Client.Create(t.Context(), "f", client.CreateOptions{Overwrite: true}); err != nil {
		t.Errorf("a create after the refused delete: %v", err)
	}

	for _, epoch := range []string{"9007199254740992", "18446744073709551615"} {
		push := `{"epoch":` + epoch + `,"self":"a","members":[{"name":"a","url":"http://127.0.0.1:1"}]}`
		msg := s.Internal.Send(t, http.MethodPut, wire.MembershipPath, push).WantError(t, http.StatusBadRequest, wire.CodeBadParameter)
		if !strings.Contains(msg, "epoch: must be at most 9007199254740991") {
			t.Errorf("epoch %s: %q", epoch, msg)
		}
	}
	var m wire.Membership
	s.Internal.Send(t, http.MethodGet, wire.MembershipPath, "").WantJSON(t, http.StatusOK, &m)
	if m.Epoch != 0 {
		t.Errorf("after refused pushes the pod holds epoch %d, want 0", m.Epoch)
	}
}

func TestDumpAndMerge(t *testing.T) {
	clientMerges := func(c *config.Config) { c.AllowClientMerges = true }
	src, dst := dataplane.Handlers(t, nil), dataplane.Handlers(t, clientMerges)
	opts := client.CreateOptions{ExpectedInsertions: new(uint64(1000)), FPP: new(0.01)}
	dataplane.Create(t, src, "f", opts)
	dataplane.Create(t, dst, "f", opts)
	values := make([]string, 3000) // enough to grow the source to several layers
	for i := range values {
		values[i] = "v" + string(rune('a'+i%26)) + strings.Repeat("x", i%7) + time.Duration(i).String()
	}
	if err := src.Client.MultiSet(t.Context(), "f", values); err != nil {
		t.Fatal(err)
	}
	dump := src.Send(t, http.MethodGet, "/v1/bloomfilter/f/dump", "")
	if dump.Status != http.StatusOK || dump.Header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("dump: %d %s", dump.Status, dump.Header.Get("Content-Type"))
	}
	var merged wire.Filter
	dst.Send(t, http.MethodPost, "/v1/bloomfilter/f/merge", string(dump.Body)).WantJSON(t, http.StatusOK, &merged)
	if merged.Layers != dataplane.Get(t, src, "f").Layers {
		t.Errorf("after the merge the filter has %d layers, the source %d", merged.Layers, dataplane.Get(t, src, "f").Layers)
	}
	for i, ok := range dataplane.MultiCheck(t, dst, "f", values) {
		if !ok {
			t.Fatalf("after the merge %q is absent", values[i])
		}
	}

	dataplane.Create(t, dst, "other", client.CreateOptions{ExpectedInsertions: new(uint64(1000)), FPP: new(0.001)})
	if msg := dst.Send(t, http.MethodPost, "/v1/bloomfilter/other/merge", string(dump.Body)).WantError(t, http.StatusBadRequest, wire.CodeBadParameter); !strings.Contains(msg, "another shape") {
		t.Errorf("merge of another shape: %q", msg)
	}
	corrupt := bytes.Clone(dump.Body)
	corrupt[len(corrupt)-1] ^= 0x80
	if msg := dst.Send(t, http.MethodPost, "/v1/bloomfilter/f/merge", string(corrupt)).WantError(t, http.StatusBadRequest, wire.CodeBadParameter); !strings.Contains(msg, "invalid dump") {
		t.Errorf("merge of a corrupt dump: %q", msg)
	}
	dst.Send(t, http.MethodPost, "/v1/bloomfilter/absent/merge", string(dump.Body)).WantError(t, http.StatusNotFound, wire.CodeFilterNotFound)
	small := dataplane.Handlers(t, func(c *config.Config) { c.MaxHTTPRequestLength, c.AllowClientMerges = 100, true })
	dataplane.Create(t, small, "f", opts)
	small.Send(t, http.MethodPost, "/v1/bloomfilter/f/merge", string(dump.Body)).WantError(t, http.StatusRequestEntityTooLarge, wire.CodeBodyTooLarge)

	// The dump is the format persist reads.
	st, _, err := persist.ReadDump(bytes.NewReader(dump.Body), int64(len(dump.Body)))
	if err != nil || st.Name != "f" || len(st.Parts[0].Layers) != merged.Layers {
		t.Fatalf("ReadDump: %v, %+v", err, st.Options)
	}
	if err := filter.NewStore(filter.Limits{}, nil).Restore(st); err != nil {
		t.Fatal(err)
	}
}

// A merge sets bits no key set: the client port, which anyone may reach, refuses it unless the
// configuration allows it, and the internal port serves it to the token's holders.
func TestClientMergesAreOffByDefault(t *testing.T) {
	s := dataplane.Handlers(t, nil)
	opts := client.CreateOptions{ExpectedInsertions: new(uint64(1000)), FPP: new(0.01)}
	dataplane.Create(t, s, "f", opts)
	if err := s.Client.Set(t.Context(), "f", "v"); err != nil {
		t.Fatal(err)
	}
	dump := s.Send(t, http.MethodGet, "/v1/bloomfilter/f/dump", "")
	msg := s.Send(t, http.MethodPost, "/v1/bloomfilter/f/merge", string(dump.Body)).WantError(t, http.StatusNotFound, wire.CodeNoSuchRoute)
	if !strings.Contains(msg, "allowClientMerges") {
		t.Errorf("a merge on the client port: %q, want the setting named", msg)
	}
	var merged wire.Filter
	s.Internal.Send(t, http.MethodPost, wire.InternalPath("/v1/bloomfilter/f/merge"), string(dump.Body)).WantJSON(t, http.StatusOK, &merged)
	if merged.Items != 1 {
		t.Errorf("the merge through the internal port answered %+v", merged)
	}
}

// A dump with bits past its layer's size (which made every later GET answer 500, NaN) is refused
// with the reason, the filter keeps its bits and still describes.
func TestPoisonedMergeIsRefused(t *testing.T) {
	s := dataplane.Handlers(t, func(c *config.Config) { c.AllowClientMerges = true })
	opts := client.CreateOptions{ExpectedInsertions: new(uint64(1000)), FPP: new(0.01)}
	dataplane.Create(t, s, "f", opts)
	if err := s.Client.Set(t.Context(), "f", "v"); err != nil {
		t.Fatal(err)
	}
	before := dataplane.Get(t, s, "f")
	dump := s.Send(t, http.MethodGet, "/v1/bloomfilter/f/dump", "")
	st, release, err := persist.ReadDump(bytes.NewReader(dump.Body), int64(len(dump.Body)))
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	layer := st.Parts[0].Layers[0]
	if layer.Bits%64 == 0 {
		t.Fatalf("the layer's m=%d leaves no bits in its last word to poison", layer.Bits)
	}
	for i := range layer.Words {
		layer.Words[i] = ^uint64(0)
	}
	var poisoned bytes.Buffer
	if err := persist.WriteDump(&poisoned, st); err != nil {
		t.Fatal(err)
	}
	msg := s.Send(t, http.MethodPost, "/v1/bloomfilter/f/merge", poisoned.String()).WantError(t, http.StatusBadRequest, wire.CodeBadParameter)
	if !strings.Contains(msg, "bits set past") {
		t.Errorf("a merge of bits past m: %q, want the reason", msg)
	}
	if after := dataplane.Get(t, s, "f"); after.FillRatio != before.FillRatio || after.EstimatedFPP != before.EstimatedFPP {
		t.Errorf("after the refused merge the filter is %+v, was %+v", after, before)
	}
}

// A pod configured to await its membership is not ready, and answers no filter request, until
// told; then it is ready at once when it has no peers.
func TestReadinessAwaitsMembership(t *testing.T) {
	srv := dataplane.New(t, func(c *config.Config) { c.InMemory, c.AwaitMembership = true, true })
	ts, stop := dataplane.Run(t, srv)
	t.Cleanup(func() { _ = stop() })
	await.True(t, 10*time.Second, "the process to serve", func() bool {
		return ts.Send(t, http.MethodGet, "/healthz", "").Status == http.StatusOK
	})
	msg := ts.Send(t, http.MethodGet, "/readyz", "").WantError(t, http.StatusServiceUnavailable, wire.CodeUnavailable)
	if !strings.Contains(msg, "waiting for the operator") {
		t.Errorf("/readyz before the membership: %q", msg)
	}
	msg = ts.Send(t, http.MethodGet, "/v1/bloomfilter/list", "").WantError(t, http.StatusServiceUnavailable, wire.CodeUnavailable)
	if !strings.Contains(msg, "catching up") {
		t.Errorf("a filter request before the membership: %q", msg)
	}
	if err := ts.Internal.Client.SetMembership(t.Context(), wire.Membership{Epoch: 1, Self: "solo", Members: []wire.Member{{Name: "solo", URL: ts.URL}}}); err != nil {
		t.Fatal(err)
	}
	dataplane.WaitUntilReady(t, ts)
	if r := ts.Send(t, http.MethodGet, "/v1/bloomfilter/list", ""); r.Status != http.StatusOK {
		t.Errorf("a filter request once told: %d %s", r.Status, r.Body)
	}
}

// A pod that has just learned of its peers and not yet caught up from them refuses creates: a
// filter it created would be a new incarnation replacing, on every pod, the one they hold.
func TestCreateWaitsForCatchUp(t *testing.T) {
	s := dataplane.Handlers(t, nil) // no Run, so no catch-up: the pod stays behind its peers
	if err := s.Internal.Client.SetMembership(t.Context(), wire.Membership{Epoch: 1, Self: "a", Members: []wire.Member{
		{Name: "a", URL: s.Internal.URL}, {Name: "b", URL: "http://127.0.0.1:1"},
	}}); err != nil {
		t.Fatal(err)
	}
	msg := s.Send(t, http.MethodPut, "/v1/bloomfilter/f", `{}`).WantError(t, http.StatusServiceUnavailable, wire.CodeUnavailable)
	if !strings.Contains(msg, "catching up") {
		t.Errorf("create while catching up: %q", msg)
	}
	var inv wire.Inventory
	if err := s.Internal.Client.Call(t.Context(), http.MethodGet, wire.InventoryPath, "", nil, &inv); err != nil || len(inv.Filters) != 0 {
		t.Errorf("after a refused create the pod holds %v, %v", inv.Filters, err)
	}
}

// Peers send writes in the binary batch format; a malformed batch is refused whole.
func TestApplyBinaryBatches(t *testing.T) {
	s := dataplane.Handlers(t, nil)
	opts := filter.Options{Capacity: 1000, FPP: 0.01, Scalable: true, Growth: 2, Tightening: 0.5}
	gen := time.Now().UnixNano()
	batch := peer.AppendOps(nil, []peer.Op{
		{Kind: peer.OpCreate, Name: "f", Generation: gen, Options: &opts},
		{Kind: peer.OpAdd, Name: "f", Generation: gen, Keys: []string{"a", "b"}},
	})
	post := func(body []byte) dataplane.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.Internal.URL+wire.ApplyPath, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", wire.OpsContentType)
		resp, err := s.Internal.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		raw, _ := io.ReadAll(resp.Body)
		return dataplane.Response{Status: resp.StatusCode, Header: resp.Header, Body: raw}
	}
	var out struct{ Applied []bool }
	post(batch).WantJSON(t, http.StatusOK, &out)
	if len(out.Applied) != 2 || !out.Applied[0] || !out.Applied[1] {
		t.Fatalf("applied = %v, want both", out.Applied)
	}
	if present := dataplane.MultiCheck(t, s, "f", []string{"a", "b", "c"}); !present[0] || !present[1] || present[2] {
		t.Fatalf("after the batch: %v", present)
	}
	msg := post(batch[:len(batch)-1]).WantError(t, http.StatusBadRequest, wire.CodeBadParameter)
	if !strings.Contains(msg, "malformed batch") {
		t.Errorf("a truncated batch: %q", msg)
	}
}

// Peers send their batches on a stream upgraded from the internal port: batches are applied and
// answered in order, a malformed one is refused without ending the stream, and shutdown ends the
// stream before Run returns.
func TestPeersStreamBatchesToTheInternalPort(t *testing.T) {
	srv := dataplane.New(t, func(cfg *config.Config) { cfg.DataDir = t.TempDir() })
	s, stop := dataplane.Run(t, srv)
	defer func() { _ = stop() }()
	dataplane.WaitUntilReady(t, s)
	conn, err := s.Internal.Client.Upgrade(t.Context(), wire.ApplyStreamPath, wire.ApplyStreamProtocol)
	if err != nil {
		t.Fatalf("upgrade with the token: %v", err)
	}
	stream := peer.NewStream(conn)
	defer func() { _ = stream.Close() }()
	framed := func(ops ...peer.Op) []byte {
		return peer.AppendOps(make([]byte, peer.FrameHeaderSize), ops)
	}
	// The create's owner, 37e7e58f-edbd-4441-9d81-b2b3bc8ae93c, is kept by the peer as it was made.
	opts := filter.Options{Capacity: 1000, FPP: 0.01, Scalable: true, Growth: 2, Tightening: 0.5,
		Owner: filter.OwnerID{0x37, 0xe7, 0xe5, 0x8f, 0xed, 0xbd, 0x44, 0x41, 0x9d, 0x81, 0xb2, 0xb3, 0xbc, 0x8a, 0xe9, 0x3c}}
	gen := time.Now().UnixNano()
	applied, err := stream.Apply(t.Context(), framed(
		peer.Op{Kind: peer.OpCreate, Name: "f", Generation: gen, Options: &opts},
		peer.Op{Kind: peer.OpAdd, Name: "f", Generation: gen, Keys: []string{"a", "b"}},
		peer.Op{Kind: peer.OpAdd, Name: "g", Generation: gen, Keys: []string{"a"}},
	))
	if err != nil || len(applied) != 3 || applied[0] != peer.Holds || applied[1] != peer.Holds || applied[2] != peer.Lacks {
		t.Fatalf("a create, an add and an add to a filter the pod lacks: %v, %v; want true, true, false", applied, err)
	}
	broken := framed(peer.Op{Kind: peer.OpAdd, Name: "f", Generation: gen, Keys: []string{"c"}})
	if _, err := stream.Apply(t.Context(), broken[:len(broken)-1]); !peer.IsRefused(err) || !strings.Contains(err.Error(), "malformed batch") {
		t.Errorf("a truncated batch: %v, want it refused as malformed", err)
	}
	if _, err := stream.Apply(t.Context(), framed(peer.Op{Kind: peer.OpAdd, Name: "f", Generation: gen, Keys: []string{"d"}})); err != nil {
		t.Fatalf("the batch after a refused one: %v", err)
	}
	if present := dataplane.MultiCheck(t, s, "f", []string{"a", "b", "c", "d"}); !present[0] || !present[1] || present[2] || !present[3] {
		t.Errorf("after the batches: %v, want a, b and d", present)
	}
	if got := dataplane.Get(t, s, "f"); got.Owner != "37e7e58f-edbd-4441-9d81-b2b3bc8ae93c" {
		t.Errorf("the replicated create's owner: %q, want 37e7e58f-edbd-4441-9d81-b2b3bc8ae93c", got.Owner)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := stream.Apply(t.Context(), framed(peer.Op{Kind: peer.OpAdd, Name: "f", Generation: gen, Keys: []string{"e"}})); err == nil {
		t.Error("a batch after shutdown was answered, want the stream closed")
	}
}

// A peer may send a multi- request's values as base64 (wire.PeerValuesBody: RESP's items that are
// not UTF-8); only a peer, on the internal port. Bad base64 is refused.
func TestValuesAsBase64AreAPeersOnly(t *testing.T) {
	s := dataplane.Start(t, nil)
	rdb := dataplane.RedisClient(t, s)
	if err := rdb.BFReserve(t.Context(), "f", 0.001, 1000).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.BFAdd(t.Context(), "f", "\xff\xfe").Err(); err != nil {
		t.Fatal(err)
	}
	post := func(base, path string, body []byte, peer bool) dataplane.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if peer {
			req.Header.Set(wire.ForwardedHeader, "1")
		}
		httpClient := s.HTTP
		if base == s.Internal.URL {
			httpClient = s.Internal.HTTP
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		raw, _ := io.ReadAll(resp.Body)
		return dataplane.Response{Status: resp.StatusCode, Header: resp.Header, Body: raw}
	}
	// The bytes, the bytes as JSON would mangle them, and a value never added.
	values := []string{"\xff\xfe", "\ufffd\ufffd", "plain"}
	body, err := json.Marshal(wire.PeerValuesBody(values))
	if err != nil || !strings.Contains(string(body), wire.Base64ValuesField) {
		t.Fatalf("the body of values that are not all UTF-8: %s, %v; want %s", body, err, wire.Base64ValuesField)
	}
	public := wire.FilterOpPath("f", wire.OpMultiCheck)
	var answers []bool
	post(s.Internal.URL, wire.InternalPath(public), body, true).WantJSON(t, http.StatusOK, &answers)
	if !slices.Equal(answers, []bool{true, false, false}) {
		t.Fatalf("a peer's multi-check of values as base64 answered %v, want [true false false]", answers)
	}
	if msg := post(s.URL, public, body, true).WantError(t, http.StatusBadRequest, wire.CodeBadParameter); !strings.Contains(msg, "unknown parameter") {
		t.Errorf("base64 values on the client port: %q; want unknown parameter", msg)
	}
	if msg := post(s.Internal.URL, wire.InternalPath(public), body, false).WantError(t, http.StatusBadRequest, wire.CodeBadParameter); !strings.Contains(msg, "unknown parameter") {
		t.Errorf("base64 values on the internal port from the operator, not a peer: %q; want unknown parameter", msg)
	}
	bad := []byte(`{"` + wire.Base64ValuesField + `": ["not base64!"]}`)
	if msg := post(s.Internal.URL, wire.InternalPath(public), bad, true).WantError(t, http.StatusBadRequest, wire.CodeBadParameter); !strings.Contains(msg, wire.Base64ValuesField) {
		t.Errorf("a peer's bad base64: %q; want an error naming %s", msg, wire.Base64ValuesField)
	}
}

// A pod keeps the last membership it was told in its data directory: restarted on it, it counts
// its peers before anyone tells it again, so that a write at consistency all is not acknowledged
// by the restarted pod alone.
func TestARestartedPodKeepsItsMembership(t *testing.T) {
	dir := t.TempDir()
	configure := func(c *config.Config) { c.DataDir, c.ReplicationTimeout = dir, 200*time.Millisecond }
	ts, stop := dataplane.Run(t, dataplane.New(t, configure))
	t.Cleanup(func() { _ = stop() })
	dataplane.WaitUntilReady(t, ts)
	dataplane.Create(t, ts, "f", client.CreateOptions{})
	told := wire.Membership{Epoch: 7, Self: "a", Members: []wire.Member{{Name: "a", URL: ts.Internal.URL}, {Name: "b", URL: "http://127.0.0.1:1"}}}
	if err := ts.Internal.Client.SetMembership(t.Context(), told); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	ts, stop = dataplane.Run(t, dataplane.New(t, configure))
	t.Cleanup(func() { _ = stop() })
	await.True(t, 10*time.Second, "the restarted pod to serve", func() bool {
		return ts.Send(t, http.MethodGet, "/healthz", "").Status == http.StatusOK
	})
	m, err := ts.Internal.Client.Membership(t.Context())
	if err != nil || m.Epoch != told.Epoch || len(m.Members) != 2 {
		t.Fatalf("the restarted pod's membership: %+v, %v; want epoch %d of 2 pods, untold", m, err, told.Epoch)
	}
	dataplane.WaitUntilReady(t, ts) // catching up from b, which does not answer, ends at once
	err = ts.Client.At(wire.ConsistencyAll).Set(t.Context(), "f", "x")
	dataplane.WantAPIError(t, err, http.StatusServiceUnavailable, wire.CodeReplication)
}

// maxDumpBytes bounds the dumps anyone may ask on the client port, not the cluster's own: a peer
// catching up pulls a filter of any size through the internal port.
func TestMaxDumpBytesBoundsClientDumpsOnly(t *testing.T) {
	s := dataplane.Handlers(t, func(c *config.Config) { c.MaxDumpBytes = 1 << 10 })
	dataplane.Create(t, s, "f", client.CreateOptions{ExpectedInsertions: new(uint64(100_000)), FPP: new(0.01)})
	s.Send(t, http.MethodGet, "/v1/bloomfilter/f/dump", "").WantError(t, http.StatusInsufficientStorage, wire.CodeInsufficientSpace)
	if r := s.Internal.Send(t, http.MethodGet, wire.InternalPath("/v1/bloomfilter/f/dump"), ""); r.Status != http.StatusOK || len(r.Body) < 1<<10 {
		t.Errorf("the internal port's dump of a filter over maxDumpBytes: %d, %d bytes; want it served whole", r.Status, len(r.Body))
	}
}
