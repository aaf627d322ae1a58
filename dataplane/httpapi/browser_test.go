package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/bloomery/bloomery/dataplane/apidocs"
)

// devTools drives a headless Chromium through the DevTools protocol, as far as the tests need:
// open a page and evaluate script in it.
type devTools struct {
	ws      *websocket.Conn
	session string
	nextID  int
}

// openInBrowser starts Chromium, opens url in a new tab and returns a connection to that tab. The
// browser ends with the test.
func openInBrowser(t *testing.T, url string) *devTools {
	t.Helper()
	browser := chromium(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, browser,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--no-first-run", "--no-default-browser-check",
		"--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "--remote-allow-origins=*",
		"--user-data-dir="+t.TempDir(), "about:blank")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", browser, err)
	}
	exited := make(chan struct{})
	endpoint := make(chan string, 1)
	go func() {
		defer close(exited)
		listening := regexp.MustCompile(`DevTools listening on (ws://\S+)`)
		scanner := bufio.NewScanner(stderr)
		for scanner.Scan() {
			if m := listening.FindStringSubmatch(scanner.Text()); m != nil {
				endpoint <- m[1]
			}
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() { cancel(); <-exited })

	var wsURL string
	select {
	case wsURL = <-endpoint:
	case <-exited:
		t.Fatalf("%s exited before it listened for DevTools", browser)
	case <-time.After(time.Minute):
		t.Fatalf("%s did not listen for DevTools in time", browser)
	}
	ws, err := websocket.Dial(wsURL, "", "http://127.0.0.1/")
	if err != nil {
		t.Fatalf("connecting to DevTools: %v", err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	dt := &devTools{ws: ws}
	var target struct{ TargetID string }
	dt.call(t, "Target.createTarget", map[string]any{"url": url}, &target)
	var attached struct{ SessionID string }
	dt.call(t, "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &attached)
	dt.session = attached.SessionID
	// The new tab starts on about:blank, which is complete at once.
	loaded := fmt.Sprintf(`location.href === %q && document.readyState === "complete"`, url)
	deadline := time.Now().Add(time.Minute)
	for dt.evaluate(t, loaded) != "true" {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not load in time", url)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return dt
}

// call sends one command and decodes its result into result, skipping the events in between.
func (dt *devTools) call(t *testing.T, method string, params map[string]any, result any) {
	t.Helper()
	dt.nextID++
	msg := map[string]any{"id": dt.nextID, "method": method, "params": params}
	if dt.session != "" {
		msg["sessionId"] = dt.session
	}
	if err := dt.ws.SetDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := websocket.JSON.Send(dt.ws, msg); err != nil {
		t.Fatalf("DevTools %s: %v", method, err)
	}
	for {
		var reply struct {
			ID     int
			Result json.RawMessage
			Error  *struct{ Message string }
		}
		if err := websocket.JSON.Receive(dt.ws, &reply); err != nil {
			t.Fatalf("DevTools %s: %v", method, err)
		}
		if reply.ID != dt.nextID {
			continue // an event
		}
		if reply.Error != nil {
			t.Fatalf("DevTools %s: %s", method, reply.Error.Message)
		}
		if err := json.Unmarshal(reply.Result, result); err != nil {
			t.Fatalf("DevTools %s: %v", method, err)
		}
		return
	}
}

// evaluate runs a JavaScript expression in the page, awaiting it if it is a promise, and returns
// its value as a string.
func (dt *devTools) evaluate(t *testing.T, expression string) string {
	t.Helper()
	var out struct {
		Result struct {
			Value any
		}
		ExceptionDetails *struct {
			Text      string
			Exception struct{ Description string }
		}
	}
	dt.call(t, "Runtime.evaluate", map[string]any{"expression": expression, "awaitPromise": true, "returnByValue": true}, &out)
	if e := out.ExceptionDetails; e != nil {
		t.Fatalf("evaluating %s: %s %s", expression, e.Text, e.Exception.Description)
	}
	if s, ok := out.Result.Value.(string); ok {
		return s
	}
	return fmt.Sprint(out.Result.Value)
}

// A person can send requests from the page: filling in the create operation and pressing its
// button creates the filter, and the page shows the answer.
func TestDocsPageSendsRequests(t *testing.T) {
	s, hs := docsServer(t, true)
	page := openInBrowser(t, hs.URL+"/v1/docs/")
	answer := page.evaluate(t, `(async () => {
		const op = document.getElementById("createFilter");
		op.open = true;
		op.querySelector('input[aria-label="name"]').value = "made-in-the-browser";
		op.querySelector('textarea').value = '{"expectedInsertions": 1234, "fpp": 0.01}';
		op.querySelector('button').click();
		const result = op.querySelector('pre.result');
		for (let i = 0; i < 1000 && !/ in [0-9.]+ ms/.test(result.textContent); i++) {
			await new Promise(resolve => setTimeout(resolve, 10));
		}
		return result.textContent;
	})()`)
	if !strings.HasPrefix(answer, "201 Created") || !strings.Contains(answer, `"expectedInsertions": 1234`) {
		t.Errorf("the page shows:\n%s\nwant the 201 answer with the new filter", answer)
	}
	f, err := s.Store.Get("made-in-the-browser")
	if err != nil {
		t.Fatalf("the request sent from the page did not create the filter: %v", err)
	}
	if f.Options().Capacity != 1234 {
		t.Errorf("created with capacity %d, want 1234", f.Options().Capacity)
	}

	answer = page.evaluate(t, `(async () => {
		const op = document.getElementById("ping");
		op.querySelector('button').click();
		const result = op.querySelector('pre.result');
		for (let i = 0; i < 1000 && !/ in [0-9.]+ ms/.test(result.textContent); i++) {
			await new Promise(resolve => setTimeout(resolve, 10));
		}
		return result.textContent;
	})()`)
	if !strings.HasPrefix(answer, "200 OK") || !strings.HasSuffix(answer, "pong") {
		t.Errorf("ping from the page shows:\n%s", answer)
	}
}

// The page shows a create's defaults, the table of error codes and the links to the rest of the
// documentation.
func TestDocsPageShowsDefaultsErrorsAndLinks(t *testing.T) {
	_, hs := docsServer(t, true)
	page := openInBrowser(t, hs.URL+"/v1/docs/")
	got := page.evaluate(t, `(() => {
		const rows = [...document.querySelectorAll("#createFilter table tr")].map(tr => [...tr.cells].map(c => c.textContent).join(" "));
		const fpp = rows.find(r => r.startsWith("fpp ")) || "";
		const codes = [...document.querySelectorAll("#errors td:first-child code")].map(c => c.textContent).join(",");
		const links = [...document.querySelectorAll("#docs a")].map(a => a.getAttribute("href")).join(" ");
		return JSON.stringify({fpp, codes, links});
	})()`)
	var shown struct{ Fpp, Codes, Links string }
	if err := json.Unmarshal([]byte(got), &shown); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	if !strings.HasPrefix(shown.Fpp, "fpp number 0.0001 ") {
		t.Errorf("the create's fpp row reads %q, want its type and default 0.0001", shown.Fpp)
	}
	if want := documentedCodes(t); shown.Codes != want {
		t.Errorf("the table of errors lists codes %q, want the document's %q", shown.Codes, want)
	}
	if !strings.Contains(shown.Links, "/docs/replication.md") || !strings.Contains(shown.Links, "/README.md") {
		t.Errorf("the page links to %q, want the README and the docs", shown.Links)
	}
}

// documentedCodes lists the error codes of the OpenAPI document, in its order, comma-separated.
func documentedCodes(t *testing.T) string {
	t.Helper()
	var doc struct {
		Components struct {
			Schemas struct {
				Error struct {
					Codes []struct {
						Code int `json:"code"`
					} `json:"x-codes"`
				}
			}
		}
	}
	if err := json.Unmarshal(apidocs.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	codes := make([]string, len(doc.Components.Schemas.Error.Codes))
	for i, c := range doc.Components.Schemas.Error.Codes {
		codes[i] = strconv.Itoa(c.Code)
	}
	return strings.Join(codes, ",")
}
