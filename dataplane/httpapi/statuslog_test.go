package httpapi

import (
	"testing"

	"github.com/bloomery/bloomery/dataplane/filter"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// A name the log forgets (its tombstone's retention is over) leaves the versions before it
// unanswerable in changes: a caller that held it live would never hear that it went.
func TestStatusLogAnswersInFullPastAForgottenName(t *testing.T) {
	l := newStatusLog()
	live := []liveStatus{{status: wire.FilterStatus{Name: "a"}, generation: 1}}
	held := l.look(live, nil)
	gone := l.look(nil, []filter.Tombstone{{Name: "a", Generation: 1}})
	if got := l.answer(gone, nil, held, true); !got.Changes || len(got.Removed) != 1 {
		t.Fatalf("since a live: %+v, want a removed", got)
	}
	forgotten := l.look(nil, nil)
	if forgotten == gone {
		t.Fatal("forgetting a name left the version as it was")
	}
	for _, since := range []string{held, gone} {
		if got := l.answer(forgotten, nil, since, true); got.Changes {
			t.Errorf("since %s, before the name was forgotten: %+v, want every filter", since, got)
		}
	}
	if got := l.answer(forgotten, nil, forgotten, true); !got.Changes {
		t.Errorf("since the version that forgot it: %+v, want changes", got)
	}
}
