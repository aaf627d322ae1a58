package process

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// redisPyExample is the redis-py example that docs/resp.md shows, kept as a file so that this
// test runs exactly what a reader copies.
const redisPyExample = "../../docs/examples/redis_py_example.py"

// redisPyOutput is what the example prints against a fresh data plane.
const redisPyOutput = `reserve: True
add: 1
madd: [0, 1]
exists: 1
mexists: [1, 0]
items: 2
expire: True
ttl: 3600
expire gt: False
pexpire lt: True
pttl <= 90000: True
persist: True
ttl: -1
ttl of a missing key: -2
error: NX and XX, GT or LT options at the same time are not compatible
expire in the past: True
exists: 0`

// pythonWithRedis is a Python that imports redis-py (Debian's python3-redis, which `make test`
// installs): Debian's own python3 first, which another one earlier on the PATH (pyenv's, a
// virtualenv's) would not see. Under CI its absence fails the test rather than skipping it.
func pythonWithRedis(t *testing.T) string {
	t.Helper()
	candidates := []string{"/usr/bin/python3"}
	if path, err := exec.LookPath("python3"); err == nil {
		candidates = append(candidates, path)
	}
	for _, python := range candidates {
		if exec.CommandContext(t.Context(), python, "-c", "import redis").Run() == nil {
			return python
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("no python3 imports redis (apt-get install python3-redis); tried %v", candidates)
	}
	t.Skipf("no python3 imports redis (apt-get install python3-redis); tried %v", candidates)
	return ""
}

// The docs' redis-py example runs against a real data plane and prints what its comments say.
func TestRedisPyExample(t *testing.T) {
	python := pythonWithRedis(t)
	_, port := startWithRESP(t, t.TempDir())
	cmd := exec.CommandContext(t.Context(), python, redisPyExample)
	cmd.Env = append(os.Environ(), "BLOOMERY_HOST=127.0.0.1", "BLOOMERY_RESP_PORT="+port)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", redisPyExample, err, out)
	}
	if got := strings.TrimSpace(string(out)); got != redisPyOutput {
		t.Errorf("%s printed\n%s\nwant\n%s", redisPyExample, got, redisPyOutput)
	}
}

// docs/resp.md shows the example file as it is, in a python block of its own.
func TestRespDocShowsTheRedisPyExample(t *testing.T) {
	script, err := os.ReadFile(redisPyExample)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/resp.md")
	if err != nil {
		t.Fatal(err)
	}
	if block := "```python\n" + string(script) + "```\n"; !strings.Contains(string(doc), block) {
		t.Errorf("docs/resp.md does not show %s verbatim in a python block: update the one from the other", redisPyExample)
	}
}

// redisPyTransaction drives redis-py's default pipeline, which is a transaction (MULTI ... EXEC),
// with its RedisBloom API: the replies in order, a run-time error in its place, and a command
// refused at queue time discarding the whole transaction; then the commands the example does
// not show.
const redisPyTransaction = `
import os

import redis

r = redis.Redis(host="127.0.0.1", port=int(os.environ["BLOOMERY_RESP_PORT"]), decode_responses=True)

p = r.pipeline()
bf = p.bf()
bf.create("tx", 0.01, 1000)
bf.add("tx", "a")
bf.madd("tx", "a", "b")
bf.mexists("tx", "a", "c")
bf.info("tx")
res = p.execute()
print("replies:", res[:4], res[4].insertedNum)

p = r.pipeline()
p.bf().create("tx", 0.01, 1000)
p.bf().add("tx", "d")
res = p.execute(raise_on_error=False)
print("in place:", res[0], res[1])

p = r.pipeline()
p.bf().add("tx", "e")
p.execute_command("BF.ADD", "tx")
try:
    p.execute()
except redis.ResponseError as e:
    print("discarded:", e)
print("e added:", r.bf().exists("tx", "e"))

print("insert:", r.bf().insert("ins", ["x", "y", "x"], capacity=500, error=0.01, expansion=4))
i = r.bf().info("ins")
print("info:", i.capacity, i.size, i.filterNum, i.insertedNum, i.expansionRate)
print("exists:", r.bf().exists("ins", "y"), r.bf().exists("ins", "z"))
# BF.SCANDUMP and BF.LOADCHUNK go here once the port has them.
print("flushall:", r.flushall(), r.dbsize(), r.bf().exists("ins", "x"))
`

// redisPyTransactionOutput is what redisPyTransaction prints, as it does against Redis with
// RedisBloom.
const redisPyTransactionOutput = `replies: [True, 1, [0, 1], [1, 0]] 2
in place: item exists 1
discarded: Command # 2 (BF.ADD tx) of pipeline caused error: wrong number of arguments for 'bf.add' command
e added: 0
insert: [1, 1, 0]
info: 500 792 1 2 4
exists: 1 0
flushall: True 0 0`

// redis-py's default pipeline, a transaction, works through its bf() API against the real binary,
// and so do BF.INSERT, BF.INFO (a filter of 500 at 0.01 has 5,514 bits in 696 bytes, and
// RedisBloom's Size adds 96) and FLUSHALL.
func TestRedisPyTransaction(t *testing.T) {
	python := pythonWithRedis(t)
	_, port := startWithRESP(t, t.TempDir())
	cmd := exec.CommandContext(t.Context(), python, "-c", redisPyTransaction)
	cmd.Env = append(os.Environ(), "BLOOMERY_RESP_PORT="+port)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the transaction script: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != redisPyTransactionOutput {
		t.Errorf("the transaction script printed\n%s\nwant\n%s", got, redisPyTransactionOutput)
	}
}
