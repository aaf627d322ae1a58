package httpapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/bloomery/bloomery/dataplane/config"
	"github.com/bloomery/bloomery/dataplane/replication"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// A request whose process was paused while it worked (SIGSTOP, a stalled machine) until past
// requestTimeoutSeconds still gets its answer, rather than a connection that the server's write
// deadline closes unanswered.
func TestARequestPausedPastItsTimeoutIsStillAnswered(t *testing.T) {
	cfg := config.Default()
	cfg.RequestTimeout = 200 * time.Millisecond
	s := newTestAPI(t, cfg)
	node := s.Node.(*replication.Node)
	t.Cleanup(node.Close)
	// A peer, never called, makes the pod one of a cluster, whose requests have a budget.
	if err := node.SetMembership(wire.Membership{Epoch: 1, Self: "a", Members: []wire.Member{
		{Name: "a", URL: "http://127.0.0.1:1"}, {Name: "b", URL: "http://127.0.0.1:2"},
	}}); err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.Use(s.answerInTime)
	e.GET("/paused", func(c echo.Context) error {
		time.Sleep(2 * cfg.RequestTimeout) // as a paused process sees it: every deadline passed at once
		return c.String(http.StatusOK, "answered")
	})
	srv := httptest.NewUnstartedServer(e)
	srv.Config.WriteTimeout = cfg.RequestTimeout // as the data plane's servers have it
	srv.Start()
	t.Cleanup(srv.Close)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/paused", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("a request paused past its timeout: %v; want an answer, not a closed connection", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || string(body) != "answered" {
		t.Errorf("a request paused past its timeout answered %d %q (%v), want 200 %q", resp.StatusCode, body, err, "answered")
	}
}
