// grain-ping and activation on Proto.Actor Go's cluster: virtual actors ("grains") of the kind
// "ping", hosted by two member processes, driven by this process as a client-only member. The
// members find each other with the automanaged provider (HTTP health endpoints, no external
// service) and place grains with the disthash identity lookup (the hash owner activates).
package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/automanaged"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"

	"rally.bench/peers/protoactor-go/messages"
)

const (
	grainKind        = "ping"
	grainClusterName = "rally-bench"
	// grainRequestTimeout bounds one request, retries included.
	grainRequestTimeout = 5 * time.Second
	// grainMembers is how many member processes host the kind.
	grainMembers = 2
	// automanagedRefresh is how often the automanaged provider polls the members' health
	// endpoints (its default is 2 s; shorter only makes the cluster form sooner).
	automanagedRefresh = 500 * time.Millisecond
	// clusterFormLimit bounds how long the client waits to see both members.
	clusterFormLimit = 60 * time.Second
)

// activeGrains counts the grains alive in this member process.
var activeGrains atomic.Int64

// pingGrain is the benchmark's virtual actor: it replies "Hello " + the text.
type pingGrain struct{}

func (pingGrain) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		activeGrains.Add(1)
	case *actor.Stopped:
		activeGrains.Add(-1)
	case *messages.Ping:
		ctx.Respond(&messages.GrainPong{Text: "Hello " + msg.Text})
	}
}

// memberStatsActor answers the client's questions about this member process.
type memberStatsActor struct{}

func (memberStatsActor) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(*messages.MemberQuery); ok {
		ctx.Respond(&messages.MemberReply{
			CpuNs:         processCPU().Nanoseconds(),
			ResidentBytes: residentBytes(),
			ActiveGrains:  activeGrains.Load(),
		})
	}
}

// residentBytes is this process's resident set size (from /proc/self/statm), 0 if unknown.
func residentBytes() int64 {
	text, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(text))
	if len(fields) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(fields[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}

// freePort asks the OS for a free loopback TCP port (for the automanaged health endpoints,
// whose ports every member must know in advance).
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// newClusterSystem starts an actor system with remoting on loopback and a cluster on it: a member
// hosting the ping kind when autoPort > 0, a client otherwise.
func newClusterSystem(autoPort int, hosts []string, member bool) *cluster.Cluster {
	system := newLocalSystem()
	provider := automanaged.NewWithConfig(automanagedRefresh, autoPort, hosts...)
	var opts []cluster.ConfigOption
	if member {
		opts = append(opts, cluster.WithKinds(cluster.NewKind(grainKind,
			actor.PropsFromProducer(func() actor.Actor { return pingGrain{} }))))
	}
	config := cluster.Configure(grainClusterName, provider, disthash.New(),
		remote.Configure("127.0.0.1", 0), opts...)
	c := cluster.New(system, config)
	if member {
		c.StartMember()
	} else {
		c.StartClient()
	}
	return c
}

// runGrainMember is the "grain-member" subcommand: a member hosting the ping kind. It prints
// "READY <address>" and serves until its stdin closes.
func runGrainMember(args []string) {
	fs := flag.NewFlagSet("grain-member", flag.ExitOnError)
	autoPort := fs.Int("auto-port", 0, "the port of this member's automanaged health endpoint")
	hosts := fs.String("hosts", "", "host:port of every member's health endpoint, comma separated")
	_ = fs.Parse(args)
	c := newClusterSystem(*autoPort, strings.Split(*hosts, ","), true)
	if _, err := c.ActorSystem.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return memberStatsActor{} }), "member-stats"); err != nil {
		fmt.Fprintf(os.Stderr, "protoactor-bench grain-member: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("READY %s\n", c.ActorSystem.Address())
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// grainCluster is the client side of a run: the client cluster and the members' stats actors.
type grainCluster struct {
	client  *cluster.Cluster
	members []*actor.PID
}

// startGrainCluster starts the member processes and a client that sees both of them.
func startGrainCluster() (*grainCluster, error) {
	ports := make([]int, grainMembers)
	hosts := make([]string, grainMembers)
	for i := range ports {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i], hosts[i] = port, fmt.Sprintf("127.0.0.1:%d", port)
	}
	gc := &grainCluster{}
	for i := range ports {
		addr, err := startChildWith("grain-member", "--auto-port", strconv.Itoa(ports[i]), "--hosts", strings.Join(hosts, ","))
		if err != nil {
			return nil, err
		}
		gc.members = append(gc.members, actor.NewPID(addr, "member-stats"))
	}
	gc.client = newClusterSystem(0, hosts, false)
	deadline := time.Now().Add(clusterFormLimit)
	for gc.client.MemberList.Length() < grainMembers {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the client saw %d of %d members after %v", gc.client.MemberList.Length(), grainMembers, clusterFormLimit)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return gc, nil
}

// ping sends one request to a grain and checks the reply.
func (gc *grainCluster) ping(identity, text string) error {
	res, err := gc.client.Request(identity, grainKind, &messages.Ping{Text: text}, cluster.WithTimeout(grainRequestTimeout))
	if err != nil {
		return err
	}
	pong, ok := res.(*messages.GrainPong)
	if !ok {
		return fmt.Errorf("unexpected reply %T", res)
	}
	if pong.Text != "Hello "+text {
		return fmt.Errorf("wrong reply %q to %q", pong.Text, text)
	}
	return nil
}

// memberStats asks every member for its CPU time, resident bytes and active grains.
func (gc *grainCluster) memberStats() ([]*messages.MemberReply, error) {
	var out []*messages.MemberReply
	for _, pid := range gc.members {
		res, err := gc.client.ActorSystem.Root.RequestFuture(pid, &messages.MemberQuery{}, 10*time.Second).Result()
		if err != nil {
			return nil, fmt.Errorf("member query: %w", err)
		}
		reply, ok := res.(*messages.MemberReply)
		if !ok {
			return nil, fmt.Errorf("member query: unexpected reply %T", res)
		}
		out = append(out, reply)
	}
	return out, nil
}

func randomText() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// parseList parses "8,32,128" into numbers.
func parseList(text string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(text, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", part)
		}
		out = append(out, n)
	}
	return out, nil
}

func grainReport(scenario string, c commonFlags) *report {
	rep := newReport(scenario, c.json)
	rep.Params["layout"] = "2 member processes hosting the kind + this process as a client, loopback TCP (gRPC)"
	rep.Params["provider"] = "automanaged (refresh 500 ms)"
	rep.Params["identity_lookup"] = "disthash"
	rep.Params["serializer"] = "protobuf"
	rep.Params["request_timeout_ms"] = grainRequestTimeout.Milliseconds()
	return rep
}

// grainPing is the messaging test: P loops, each owning one grain, in a closed loop.
func grainPing(args []string) (*report, error) {
	var parallelism string
	var seconds float64
	c, err := parseFlags("grain-ping", args, func(fs *flag.FlagSet) {
		fs.StringVar(&parallelism, "parallelism", "", "parallelism per row, comma separated (default 8,32,128,512; --quick 8,32)")
		fs.Float64Var(&seconds, "seconds", 0, "timed seconds per row (default 10; --quick 1)")
	})
	if err != nil {
		return nil, err
	}
	if parallelism == "" {
		parallelism = "8,32,128,512"
		if c.quick {
			parallelism = "8,32"
		}
	}
	if seconds <= 0 {
		seconds = 10
		if c.quick {
			seconds = 1
		}
	}
	rows, err := parseList(parallelism)
	if err != nil {
		return nil, err
	}
	gc, err := startGrainCluster()
	if err != nil {
		return nil, err
	}
	rep := grainReport("grain-ping", c)
	rep.Params["seconds"] = seconds
	rep.Params["warm_up"] = "one request per loop before the timed part (activates its grain)"
	for _, p := range rows {
		row, err := withRowLimit(fmt.Sprintf("P=%d", p), func() (*row, error) {
			return grainPingRow(gc, p, time.Duration(seconds*float64(time.Second)))
		})
		if err != nil {
			return nil, err
		}
		rep.Rows = append(rep.Rows, row)
	}
	return rep, nil
}

func grainPingRow(gc *grainCluster, p int, duration time.Duration) (*row, error) {
	for i := 0; i < p; i++ {
		if err := gc.ping(fmt.Sprintf("ping-%d", i), randomText()); err != nil {
			return nil, fmt.Errorf("warm-up of ping-%d: %w", i, err)
		}
	}
	before, err := gc.memberStats()
	if err != nil {
		return nil, err
	}
	clientBefore := processCPU()
	var wg sync.WaitGroup
	hists := make([]*hdrhistogram.Histogram, p)
	errs := make([]int64, p)
	start := time.Now()
	end := start.Add(duration)
	for i := 0; i < p; i++ {
		hists[i] = hdrhistogram.New(1, 60_000_000, 3)
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			identity := fmt.Sprintf("ping-%d", i)
			for time.Now().Before(end) {
				text := randomText()
				t0 := time.Now()
				if err := gc.ping(identity, text); err != nil {
					errs[i]++
					continue
				}
				_ = hists[i].RecordValue(time.Since(t0).Microseconds())
			}
		}(i)
	}
	wg.Wait()
	elapsed := time.Since(start)
	clientCPU := processCPU() - clientBefore
	after, err := gc.memberStats()
	if err != nil {
		return nil, err
	}
	total := hdrhistogram.New(1, 60_000_000, 3)
	var errors int64
	for i := range hists {
		total.Merge(hists[i])
		errors += errs[i]
	}
	ok := total.TotalCount()
	r := newRow(fmt.Sprintf("P=%d", p)).clients(p).throughput(ok, elapsed)
	r.P50us, r.P99us = f64(float64(total.ValueAtQuantile(50))), f64(float64(total.ValueAtQuantile(99)))
	r.with("parallelism", p).with("errors", errors).with("mean_us", total.Mean())
	r.with("client_cpu_ms", float64(clientCPU.Microseconds())/1000)
	var memberCPU []float64
	for i := range after {
		memberCPU = append(memberCPU, float64(after[i].CpuNs-before[i].CpuNs)/1e6)
	}
	r.with("member_cpu_ms", memberCPU)
	return r, nil
}

// activation is the activation test: N fresh identities taken in order by P workers, one
// request each, which activates the grain.
func activation(args []string) (*report, error) {
	var counts string
	var workers int
	c, err := parseFlags("activation", args, func(fs *flag.FlagSet) {
		fs.StringVar(&counts, "activations", "", "activations per row, comma separated (default 100000,1000000; --quick 10000)")
		fs.IntVar(&workers, "workers", 64, "parallel workers")
	})
	if err != nil {
		return nil, err
	}
	if counts == "" {
		counts = "100000,1000000"
		if c.quick {
			counts = "10000"
		}
	}
	rows, err := parseList(counts)
	if err != nil {
		return nil, err
	}
	gc, err := startGrainCluster()
	if err != nil {
		return nil, err
	}
	rep := grainReport("activation", c)
	rep.Params["workers"] = workers
	rep.Params["warm_up"] = "none: every identity is new, the first request activates it"
	for index, n := range rows {
		row, err := withRowLimit(fmt.Sprintf("N=%d", n), func() (*row, error) {
			return activationRow(gc, index, n, workers)
		})
		if err != nil {
			return nil, err
		}
		rep.Rows = append(rep.Rows, row)
	}
	return rep, nil
}

func activationRow(gc *grainCluster, index, n, workers int) (*row, error) {
	before, err := gc.memberStats()
	if err != nil {
		return nil, err
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	hists := make([]*hdrhistogram.Histogram, workers)
	errs := make([]int64, workers)
	start := time.Now()
	for w := 0; w < workers; w++ {
		hists[w] = hdrhistogram.New(1, 60_000_000, 3)
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for {
				k := next.Add(1) - 1
				if k >= int64(n) {
					return
				}
				t0 := time.Now()
				if err := gc.ping(activationIdentity(uint32(index), uint32(k)), ""); err != nil {
					errs[w]++
					continue
				}
				_ = hists[w].RecordValue(time.Since(t0).Microseconds())
			}
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(start)
	after, err := gc.memberStats()
	if err != nil {
		return nil, err
	}
	total := hdrhistogram.New(1, 60_000_000, 3)
	var errors int64
	for w := range hists {
		total.Merge(hists[w])
		errors += errs[w]
	}
	ok := total.TotalCount()
	r := newRow(fmt.Sprintf("N=%d", n)).throughput(ok, elapsed)
	r.P50us, r.P99us = f64(float64(total.ValueAtQuantile(50))), f64(float64(total.ValueAtQuantile(99)))
	r.with("activations", ok).with("errors", errors).with("activations_per_sec", *r.MsgsPerSec)
	var perMember []float64
	var active []int64
	var sum float64
	for i := range after {
		grains := after[i].ActiveGrains - before[i].ActiveGrains
		active = append(active, grains)
		bytes := 0.0
		if grains > 0 {
			bytes = float64(after[i].ResidentBytes-before[i].ResidentBytes) / float64(grains)
		}
		perMember = append(perMember, bytes)
		sum += bytes
	}
	r.with("active_per_member", active).with("bytes_per_actor_per_member", perMember)
	r.with("bytes_per_actor", sum/float64(len(perMember)))
	return r, nil
}

// activationIdentity is the identity of the k-th request of activation row `row`: UUID-shaped
// (8-4-4-4-12 lowercase hex), spread over the key space as real identities are, unique (the
// first 64 bits are SplitMix64's finaliser of row<<32 | k, a bijection), and the same string
// Rally's harness computes.
func activationIdentity(row, k uint32) string {
	hi := splitmix64(uint64(row)<<32 | uint64(k))
	lo := splitmix64(hi)
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", hi>>32, (hi>>16)&0xffff, hi&0xffff, lo>>48, lo&0xffffffffffff)
}

// splitmix64 is SplitMix64's output function: a bijection that scatters neighbouring inputs.
func splitmix64(x uint64) uint64 {
	z := x + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// withRowLimit runs one row under the harness's per-row time limit.
func withRowLimit(label string, run func() (*row, error)) (*row, error) {
	type result struct {
		row *row
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := run()
		done <- result{r, err}
	}()
	select {
	case res := <-done:
		return res.row, res.err
	case <-time.After(grainRowLimit()):
		return nil, errors.New(label + " did not finish within its time limit")
	}
}

// grainRowLimit is longer than the other scenarios' row limit (a million activations take
// minutes on some frameworks): 10 min, 60 s with --quick.
func grainRowLimit() time.Duration {
	if rowLimit <= 30*time.Second {
		return 60 * time.Second
	}
	return 10 * time.Minute
}
