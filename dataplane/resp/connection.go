package resp

import (
	"context"
	"strconv"
	"strings"
)

// connectionCommands are the commands clients send to set a connection up: enough for
// redis-cli and go-redis to connect, select database 0 and name themselves.
var connectionCommands = map[string]command{
	"ping":    {arity: -1, run: ping},
	"echo":    {arity: 2, run: echo},
	"hello":   {arity: -1, run: hello, noAuth: true, noMulti: true},
	"auth":    {arity: -2, run: auth, noAuth: true, noMulti: true},
	"select":  {arity: 2, run: selectDB},
	"client":  {arity: -2, run: clientCmd},
	"command": {arity: -1, run: commandInfo},
	"quit":    {arity: -1, run: quit, noAuth: true, runsAtOnce: true},
}

func ping(_ context.Context, _ *Server, c *call) error {
	switch len(c.args) {
	case 1:
		c.w.WriteString("PONG")
	case 2:
		c.w.WriteBulkString(c.arg(1))
	default:
		return wrongArity("ping")
	}
	return nil
}

func echo(_ context.Context, _ *Server, c *call) error {
	c.w.WriteBulkString(c.arg(1))
	return nil
}

// hello switches the connection to the protocol asked for, RESP2 or RESP3, and answers the
// server's map in it, as Redis 7 does; without a version it answers in the connection's protocol.
// AUTH user password authenticates as AUTH does; a connection that has not authenticated, when a
// password is required, is answered NOAUTH. The protocol and the options apply only once the
// connection is authenticated: a HELLO answered an error changes nothing.
func hello(_ context.Context, s *Server, c *call) error {
	resp3 := c.sess.resp3
	if len(c.args) > 1 {
		v, err := strconv.ParseInt(c.arg(1), 10, 64)
		switch {
		case err != nil:
			return replyError("ERR Protocol version is not an integer or out of range")
		case v != 2 && v != 3:
			return replyError("NOPROTO unsupported protocol version")
		}
		resp3 = v == 3
	}
	var user, password []byte
	var name *string
	for i := 2; i < len(c.args); i++ {
		more := len(c.args) - 1 - i
		switch opt := strings.ToUpper(c.arg(i)); {
		case opt == "AUTH" && more >= 2:
			user, password = c.args[i+1], c.args[i+2]
			i += 2
		case opt == "SETNAME" && more >= 1:
			if err := checkClientName(c.arg(i + 1)); err != nil {
				return err
			}
			name = new(c.arg(i + 1))
			i++
		default:
			return errorf("Syntax error in HELLO option '%s'", c.arg(i))
		}
	}
	if user != nil {
		if err := s.authenticate(c.sess, user, password); err != nil {
			return err
		}
	}
	if s.hasPassword && !c.sess.authenticated {
		return errHelloNoAuth
	}
	if name != nil {
		c.sess.name = *name
	}
	c.sess.resp3, c.w.resp3 = resp3, resp3
	proto := int64(2)
	if resp3 {
		proto = 3
	}
	c.w.WriteMap(7)
	c.w.WriteBulkString("server")
	c.w.WriteBulkString("bloomery")
	c.w.WriteBulkString("version")
	c.w.WriteBulkString(redisVersion)
	c.w.WriteBulkString("proto")
	c.w.WriteInt64(proto)
	c.w.WriteBulkString("id")
	c.w.WriteInt64(0)
	c.w.WriteBulkString("mode")
	c.w.WriteBulkString("standalone")
	c.w.WriteBulkString("role")
	c.w.WriteBulkString("master")
	c.w.WriteBulkString("modules")
	c.w.WriteArray(0)
	return nil
}

// selectDB accepts database 0 alone: the filters are one key space.
func selectDB(_ context.Context, _ *Server, c *call) error {
	db, err := strconv.ParseInt(c.arg(1), 10, 64)
	switch {
	case err != nil:
		return errorf("value is not an integer or out of range")
	case db != 0:
		return errorf("DB index is out of range")
	}
	c.w.WriteString("OK")
	return nil
}

func clientCmd(_ context.Context, _ *Server, c *call) error {
	sub := strings.ToLower(c.arg(1))
	switch {
	case sub == "setname" && len(c.args) == 3:
		if err := checkClientName(c.arg(2)); err != nil {
			return err
		}
		c.sess.name = c.arg(2)
	case sub == "getname" && len(c.args) == 2:
		if c.sess.name == "" {
			c.w.WriteNull()
		} else {
			c.w.WriteBulkString(c.sess.name)
		}
		return nil
	case sub == "setinfo" && len(c.args) == 4:
		switch strings.ToLower(c.arg(2)) {
		case "lib-name":
			c.sess.libName = c.arg(3)
		case "lib-ver":
			c.sess.libVersion = c.arg(3)
		default:
			return errorf("Unrecognized option '%s'", c.arg(2))
		}
	case sub == "setname" || sub == "getname" || sub == "setinfo":
		return errorf("wrong number of arguments for 'client|%s' command", sub)
	default:
		return errorf("unknown subcommand '%s'. Try CLIENT HELP.", truncate(c.arg(1), 128))
	}
	c.w.WriteString("OK")
	return nil
}

// checkClientName refuses what Redis refuses in a client's name.
func checkClientName(name string) error {
	for _, ch := range []byte(name) {
		if ch < '!' || ch > '~' {
			return errorf("Client names cannot contain spaces, newlines or special characters.")
		}
	}
	return nil
}

// commandInfo answers COMMAND COUNT with the table's size, COMMAND DOCS with no documentation (a
// map in RESP3, as Redis's), and any other form with an empty array: redis-cli and go-redis go on
// without command documentation.
func commandInfo(_ context.Context, _ *Server, c *call) error {
	switch {
	case len(c.args) == 2 && strings.EqualFold(c.arg(1), "count"):
		c.w.WriteInt64(int64(len(commands)))
	case len(c.args) >= 2 && strings.EqualFold(c.arg(1), "docs"):
		c.w.WriteMap(0)
	default:
		c.w.WriteArray(0)
	}
	return nil
}

func quit(_ context.Context, _ *Server, c *call) error {
	c.w.WriteString("OK")
	c.quit = true
	return nil
}
