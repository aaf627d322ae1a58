package replication

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/bloomery/bloomery/dataplane/peer"
	"github.com/bloomery/bloomery/dataplane/wire"
)

// A pod keeps the last membership it was told in a file of its data directory. A pod restarted
// without it would count itself a cluster of one until the operator tells it again: a write at
// consistency all would then be acknowledged by this pod alone, and a read at quorum elsewhere
// could miss it.

// keptMembership is the membership file: the membership, and the moving membership it ended
// while some member may still hold that one (Node.endMove), so that a pod restarted meanwhile
// still writes to the move's writers until every member holds the membership that ended it.
// A file of a bare membership, from before EndedMove, reads as one that ended no move.
type keptMembership struct {
	wire.Membership
	EndedMove *wire.Membership `json:"endedMove,omitempty"`
}

// keep writes m, and the move it ends (endingMove records it first), to the membership file
// before m is installed, when it is news: the pod never counts acknowledgements against a
// membership it could not keep. A membership Set would refuse is refused here first, so that the
// file never holds one the pod does not.
func (n *Node) keep(before, m wire.Membership) error {
	if n.membershipFile == "" || (m.Epoch == before.Epoch && Same(m, before)) {
		return nil
	}
	if err := n.members.Accepts(m); err != nil {
		return err
	}
	kept := keptMembership{Membership: m}
	n.placed.mu.Lock()
	if n.placed.endedBy == m.Epoch {
		ended := n.placed.ended
		kept.EndedMove = &ended
	}
	n.placed.mu.Unlock()
	if err := writeFileAtomic(n.membershipFile, kept); err != nil {
		return fmt.Errorf("%w: %w", peer.ErrMembershipNotKept, err)
	}
	return nil
}

// Remember keeps every membership the pod is told from now on in file, and installs the one kept
// there before the pod restarted, if it names this pod. With AwaitMembership the pod counts its
// peers and sends them writes, but waits to be told its membership before it catches up and
// serves; without, the kept membership is as good as told. Call it once, before the pod serves.
func (n *Node) Remember(file string) error {
	n.membershipFile = file
	raw, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the membership kept: %w", err)
	}
	var kept keptMembership
	if err := json.Unmarshal(raw, &kept); err != nil {
		return fmt.Errorf("the membership kept in %s: %w", n.membershipFile, err)
	}
	m := kept.Membership
	if n.opts.PodName != "" && m.Self != n.opts.PodName {
		n.opts.Log.Warn("Ignored the membership kept: it names another pod", "file", n.membershipFile, "self", m.Self, "pod", n.opts.PodName)
		return nil
	}
	ends := kept.EndedMove != nil && endsMove(*kept.EndedMove, m)
	if ends {
		n.placed.recordEnded(*kept.EndedMove, m.Epoch)
	}
	if !n.opts.AwaitMembership {
		if err := n.SetMembership(m); err != nil {
			return err
		}
	} else {
		before := n.members.Get()
		if err := n.members.Restore(m); err != nil {
			return fmt.Errorf("the membership kept in %s: %w", n.membershipFile, err)
		}
		n.changed(before, m)
	}
	if ends {
		go n.endMove(m)
	}
	return nil
}

// Kept is the membership the pod counts its peers by: what it was told, or else what it kept
// before it restarted.
func (n *Node) Kept() wire.Membership { return n.members.Get() }

// writeFileAtomic writes v as JSON to path so that a crash leaves the old file or the new one,
// whole: a temporary file, synced, renamed over path, and the directory synced.
func writeFileAtomic(path string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(raw)
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	return errors.Join(dir.Sync(), dir.Close())
}
