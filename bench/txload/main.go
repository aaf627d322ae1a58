// Command txload measures RESP transactions per second, which redis-benchmark cannot: it sends a
// transaction's commands as separate requests, so MULTI and EXEC land on whichever connection
// is free. txload opens C connections and on each, in a loop until the duration is over, writes
// MULTI, N copies of one command and EXEC in one write, then reads the N + 2 replies and checks
// them (+OK, N × +QUEUED, an array of N replies none of which is an error) before the next.
//
//	go run ./bench/txload -p 6379 -c 20 -n 16 -d 10s SET key:__rand_int__ v
//
// __rand_int__ in an argument is replaced, in each command anew, by a random number below -r,
// as redis-benchmark does. It prints one line: transactions/s, and commands/s in them.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

const placeholder = "__rand_int__"

func main() {
	port := flag.Int("p", 6379, "port on 127.0.0.1")
	conns := flag.Int("c", 20, "connections")
	n := flag.Int("n", 16, "commands in each transaction")
	duration := flag.Duration("d", 10*time.Second, "how long to send transactions")
	keyspace := flag.Int64("r", 100_000_000, "__rand_int__ is a random number below this")
	flag.Parse()
	if flag.NArg() == 0 || *conns < 1 || *n < 1 || *keyspace < 1 {
		fmt.Fprintln(os.Stderr, "usage: txload [-p PORT] [-c CONNS] [-n N] [-d DURATION] [-r KEYSPACE] COMMAND [ARG...]")
		os.Exit(2)
	}
	total, elapsed, err := run(fmt.Sprintf("127.0.0.1:%d", *port), *conns, *n, *duration, *keyspace, flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "txload:", err)
		os.Exit(1)
	}
	perSecond := float64(total) / elapsed.Seconds()
	fmt.Printf("%.0f transactions/s, %.0f commands/s\n", perSecond, perSecond*float64(*n))
}

// run drives conns connections until duration has passed and answers the transactions all of
// them completed and the time they took, from the first write to the last reply.
func run(addr string, conns, n int, duration time.Duration, keyspace int64, command []string) (int, time.Duration, error) {
	sockets := make([]net.Conn, conns)
	defer func() {
		for _, c := range sockets {
			if c != nil {
				_ = c.Close() // the counts are taken; nothing is left to send
			}
		}
	}()
	var dialer net.Dialer
	for i := range sockets {
		c, err := dialer.DialContext(context.Background(), "tcp", addr)
		if err != nil {
			return 0, 0, err
		}
		sockets[i] = c
	}
	start := time.Now()
	deadline := start.Add(duration)
	counts := make([]int, conns)
	errs := make([]error, conns)
	var wg sync.WaitGroup
	for i, c := range sockets {
		wg.Go(func() { counts[i], errs[i] = drive(c, n, deadline, keyspace, command) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	total := 0
	for i := range counts {
		if errs[i] != nil {
			return 0, 0, errs[i]
		}
		total += counts[i]
	}
	return total, elapsed, nil
}

// drive sends transactions on c until deadline and answers how many completed.
func drive(c net.Conn, n int, deadline time.Time, keyspace int64, command []string) (int, error) {
	r := bufio.NewReaderSize(c, 64<<10)
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	var buf []byte
	done := 0
	for time.Now().Before(deadline) {
		buf = appendCommand(buf[:0], []string{"MULTI"})
		args := make([]string, len(command))
		for range n {
			for i, a := range command {
				args[i] = strings.ReplaceAll(a, placeholder, strconv.FormatInt(rng.Int64N(keyspace), 10))
			}
			buf = appendCommand(buf, args)
		}
		buf = appendCommand(buf, []string{"EXEC"})
		if _, err := c.Write(buf); err != nil {
			return done, err
		}
		if err := expectSimple(r, "OK"); err != nil {
			return done, fmt.Errorf("MULTI: %w", err)
		}
		for range n {
			if err := expectSimple(r, "QUEUED"); err != nil {
				return done, fmt.Errorf("%s: %w", command[0], err)
			}
		}
		if err := expectExec(r, n); err != nil {
			return done, fmt.Errorf("EXEC: %w", err)
		}
		done++
	}
	return done, nil
}

func appendCommand(b []byte, args []string) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, '\r', '\n')
		b = append(b, a...)
		b = append(b, '\r', '\n')
	}
	return b
}

func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return "", fmt.Errorf("malformed reply line %q", line)
	}
	return line[:len(line)-2], nil
}

func expectSimple(r *bufio.Reader, want string) error {
	line, err := readLine(r)
	if err != nil {
		return err
	}
	if line != "+"+want {
		return fmt.Errorf("reply %q, want +%s", line, want)
	}
	return nil
}

// expectExec reads EXEC's reply: an array of n replies, none an error.
func expectExec(r *bufio.Reader, n int) error {
	line, err := readLine(r)
	if err != nil {
		return err
	}
	if line != "*"+strconv.Itoa(n) {
		return fmt.Errorf("reply %q, want an array of %d", line, n)
	}
	for range n {
		if err := skipReply(r); err != nil {
			return err
		}
	}
	return nil
}

// skipReply reads one RESP2 reply of any type and fails on an error reply.
func skipReply(r *bufio.Reader) error {
	line, err := readLine(r)
	if err != nil {
		return err
	}
	switch line[0] {
	case '+', ':':
		return nil
	case '-':
		return errors.New(line[1:])
	case '$', '*':
		size, err := strconv.Atoi(line[1:])
		if err != nil {
			return fmt.Errorf("malformed reply line %q", line)
		}
		if line[0] == '$' {
			if size >= 0 {
				_, err = r.Discard(size + 2)
			}
			return err
		}
		for range size {
			if err := skipReply(r); err != nil {
				return err
			}
		}
		return nil
	default:
		return fmt.Errorf("unexpected reply line %q", line)
	}
}
