package resp

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/bloomery/bloomery/dataplane/filter"
)

// redisVersion is the Redis version HELLO and INFO answer: clients that gate features on it read
// a Redis 7 compatible server.
const redisVersion = "7.0.0"

// serverCommands are the commands about the server itself.
var serverCommands = map[string]command{
	"info": {arity: -1, run: serverInfo},
}

// infoSections are the sections INFO answers, in its order, and what each writes.
var infoSections = []struct {
	name  string
	write func(s *Server, b *strings.Builder)
}{
	{"server", (*Server).infoServer},
	{"clients", (*Server).infoClients},
	{"keyspace", (*Server).infoKeyspace},
}

// INFO [section ...]: the server, clients and keyspace sections, in Redis's format ("# Name",
// then field:value lines), a verbatim string in RESP3 as Redis 7's. No section, default, all and everything name them all; a section
// Bloomery does not keep (memory, persistence, replication...) answers nothing, as an unknown
// one does in Redis.
func serverInfo(_ context.Context, s *Server, c *call) error {
	want := map[string]bool{}
	for _, a := range c.args[1:] {
		want[strings.ToLower(string(a))] = true
	}
	every := len(want) == 0 || want["default"] || want["all"] || want["everything"]
	var b strings.Builder
	for _, section := range infoSections {
		if !every && !want[section.name] {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		section.write(s, &b)
	}
	c.w.WriteVerbatim(b.String())
	return nil
}

func (s *Server) infoServer(b *strings.Builder) {
	uptime := time.Since(s.started)
	fmt.Fprintf(b, "# Server\r\nredis_version:%s\r\nredis_mode:standalone\r\nos:%s\r\narch_bits:%d\r\n",
		redisVersion, runtime.GOOS+" "+runtime.GOARCH, strconv.IntSize)
	fmt.Fprintf(b, "process_id:%d\r\ntcp_port:%d\r\nuptime_in_seconds:%d\r\nuptime_in_days:%d\r\n",
		os.Getpid(), s.opts.Config.RESPPort, int64(uptime.Seconds()), int64(uptime.Hours()/24))
}

func (s *Server) infoClients(b *strings.Builder) {
	fmt.Fprintf(b, "# Clients\r\nconnected_clients:%d\r\n", s.clients.Load())
}

// infoKeyspace counts the filters as db0's keys, and those that expire as its expires; as in
// Redis, an empty database has no line.
func (s *Server) infoKeyspace(b *strings.Builder) {
	b.WriteString("# Keyspace\r\n")
	var keys, expires int
	s.opts.Store.Range(func(f *filter.Filter) bool {
		keys++
		if !f.Expiry().IsZero() {
			expires++
		}
		return true
	})
	if keys > 0 {
		fmt.Fprintf(b, "db0:keys=%d,expires=%d,avg_ttl=0\r\n", keys, expires)
	}
}
