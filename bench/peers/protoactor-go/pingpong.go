package main

import (
	"flag"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"rally.bench/peers/protoactor-go/messages"
)

// inFlightRemote is how many round trips each remote-ping-pong client keeps in flight (Akka.NET
// RemotePingPong primes each client with 50 messages).
const inFlightRemote = 50

// rowLimit bounds one row of any scenario (30 s with --quick).
var rowLimit = 120 * time.Second

// go_ is the local start signal of a pinger.
type go_ struct{}

// pinger sends its first inFlight messages on go_, then answers every reply with the next request
// until it has received want replies, then closes done.
type pinger struct {
	target   *actor.PID
	inFlight int
	want     int
	sent     int
	received int
	msg      any
	done     chan struct{}
}

func (p *pinger) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case go_:
		for p.sent < p.inFlight && p.sent < p.want {
			p.sent++
			ctx.Request(p.target, p.msg)
		}
	case *messages.Ping:
		p.received++
		if p.received == p.want {
			close(p.done)
			return
		}
		if p.sent < p.want {
			p.sent++
			ctx.Request(p.target, p.msg)
		}
	}
}

// runPairs starts one pinger per target, each doing want round trips with inFlight in flight,
// and times them from the start signals until the last pinger is done.
func runPairs(system *actor.ActorSystem, targets []*actor.PID, inFlight, want int) (time.Duration, error) {
	pids := make([]*actor.PID, len(targets))
	dones := make([]chan struct{}, len(targets))
	for i, target := range targets {
		done := make(chan struct{})
		dones[i] = done
		// Proto.Actor Go serializes remote messages when the endpoint writer sends them, so one
		// shared immutable message per pinger is safe.
		p := &pinger{target: target, inFlight: inFlight, want: want, msg: &messages.Ping{Text: "hit"}, done: done}
		pids[i] = system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return p }))
	}
	defer func() {
		for _, pid := range pids {
			system.Root.Stop(pid)
		}
	}()
	deadline := time.After(rowLimit)
	start := time.Now()
	for _, pid := range pids {
		system.Root.Send(pid, go_{})
	}
	for _, done := range dones {
		select {
		case <-done:
		case <-deadline:
			return 0, fmt.Errorf("%d pingers did not finish %d round trips within %v", len(targets), want, rowLimit)
		}
	}
	return time.Since(start), nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad count %q", part)
		}
		out = append(out, n)
	}
	return out, nil
}

func remotePingPong(args []string) (*report, error) {
	var clientsFlag string
	var roundTrips int
	flags, err := parseFlags("remote-ping-pong", args, func(fs *flag.FlagSet) {
		fs.StringVar(&clientsFlag, "clients", "", "client counts, comma-separated (default 1,5,10,15,20,25,30; --quick 1,5)")
		fs.IntVar(&roundTrips, "round-trips", 0, "round trips per client (default 100000; --quick 5000)")
	})
	if err != nil {
		return nil, err
	}
	clients := []int{1, 5, 10, 15, 20, 25, 30}
	if flags.quick {
		clients = []int{1, 5}
	}
	if clientsFlag != "" {
		if clients, err = parseInts(clientsFlag); err != nil {
			return nil, err
		}
	}
	if roundTrips == 0 {
		roundTrips = 100_000
		if flags.quick {
			roundTrips = 5_000
		}
	}
	for _, c := range clients {
		if c > maxEchoes {
			return nil, fmt.Errorf("at most %d clients", maxEchoes)
		}
	}

	system, _ := newSystem()
	addr, err := startRemoteNode(flags.processes)
	if err != nil {
		return nil, err
	}
	echoes := make([]*actor.PID, maxEchoes)
	for i := range echoes {
		echoes[i] = actor.NewPID(addr, fmt.Sprintf("echo%d", i))
	}
	// Warm-up: opens the connection and lets both sides settle before any timed row.
	if _, err := runPairs(system, echoes[:1], inFlightRemote, 10_000); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}

	rep := newReport("remote-ping-pong", flags.json)
	rep.pingPongTable = true
	rep.Params["processes"] = flags.processes
	rep.Params["in_flight_per_client"] = inFlightRemote
	rep.Params["round_trips_per_client"] = roundTrips
	rep.Params["message"] = "protobuf Ping{text: \"hit\"}"
	rep.Params["serializer"] = "protobuf (Proto.Actor Go remote default)"
	rep.Params["transport"] = "gRPC stream over loopback TCP"
	rep.Params["warm_up"] = "1 client x 10,000 round trips, untimed"
	for _, c := range clients {
		elapsed, err := runPairs(system, echoes[:c], inFlightRemote, roundTrips)
		if err != nil {
			return nil, err
		}
		label := fmt.Sprintf("%d clients", c)
		if c == 1 {
			label = "1 client"
		}
		rep.Rows = append(rep.Rows, newRow(label).clients(c).throughput(int64(c)*int64(roundTrips)*2, elapsed))
	}
	return rep, nil
}

// ponger answers every request with the same message.
type ponger struct{}

func (ponger) Receive(ctx actor.Context) {
	if msg, ok := ctx.Message().(*messages.Ping); ok {
		ctx.Respond(msg)
	}
}

func localPingPong(args []string) (*report, error) {
	var roundTrips int
	flags, err := parseFlags("local-ping-pong", args, func(fs *flag.FlagSet) {
		fs.IntVar(&roundTrips, "round-trips", 0, "round trips per pair (default 1,000,000; --quick 100,000)")
	})
	if err != nil {
		return nil, err
	}
	if roundTrips == 0 {
		roundTrips = 1_000_000
		if flags.quick {
			roundTrips = 100_000
		}
	}
	system := newLocalSystem()
	rep := newReport("local-ping-pong", flags.json)
	rep.Params["round_trips_per_pair"] = roundTrips
	rep.Params["message"] = "*Ping pointer (no serialization in process)"
	rep.Params["pairs"] = fmt.Sprintf("1 and one per core (%d)", runtime.NumCPU())
	rep.Params["warm_up"] = "1 pair x 100,000 round trips at 50 in flight, untimed"

	spawnPongs := func(n int) []*actor.PID {
		pids := make([]*actor.PID, n)
		for i := range pids {
			pids[i] = system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return ponger{} }))
		}
		return pids
	}
	warm := spawnPongs(1)
	if _, err := runPairs(system, warm, 50, 100_000); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	pairCounts := []int{1}
	if runtime.NumCPU() > 1 {
		pairCounts = append(pairCounts, runtime.NumCPU())
	}
	for _, pairs := range pairCounts {
		for _, inFlight := range []int{1, 50} {
			pongs := spawnPongs(pairs)
			elapsed, err := runPairs(system, pongs, inFlight, roundTrips)
			for _, pid := range pongs {
				system.Root.Stop(pid)
			}
			if err != nil {
				return nil, err
			}
			label := fmt.Sprintf("%d pair", pairs)
			if pairs > 1 {
				label += "s"
			}
			label += fmt.Sprintf(", %d in flight", inFlight)
			rep.Rows = append(rep.Rows, newRow(label).clients(pairs).throughput(int64(pairs)*int64(roundTrips)*2, elapsed).with("in_flight", inFlight))
		}
	}
	return rep, nil
}
