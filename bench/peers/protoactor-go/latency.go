package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/asynkron/protoactor-go/actor"

	"rally.bench/peers/protoactor-go/messages"
)

// drainLimit bounds the wait for the last replies after the last send.
const drainLimit = 10 * time.Second

// recorder receives the echoed probes and records each round trip from its intended send time.
type recorder struct {
	start    time.Time
	interval time.Duration
	want     int64
	received int64
	last     time.Time
	hist     *hdrhistogram.Histogram
	done     chan struct{}
}

// snapshot asks the recorder for what it has so far (after the drain limit ran out).
type snapshot struct{}

func (r *recorder) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *messages.Probe:
		now := time.Now()
		intended := r.start.Add(time.Duration(msg.Seq) * r.interval)
		_ = r.hist.RecordValue(int64(now.Sub(intended) / time.Nanosecond))
		r.received++
		r.last = now
		if r.received == r.want {
			close(r.done)
		}
	case snapshot:
		ctx.Respond(latencyResult{hist: hdrhistogram.Import(r.hist.Export()), elapsed: r.last.Sub(r.start), n: r.want, received: r.received})
	}
}

// latencyResult: n probes were sent and received came back; elapsed runs to the last reply.
type latencyResult struct {
	hist     *hdrhistogram.Histogram
	elapsed  time.Duration
	n        int64
	received int64
}

// offer sends rate probes per second for dur to echo and records the round trips.
func offer(system *actor.ActorSystem, echo *actor.PID, rate int, dur time.Duration) (latencyResult, error) {
	interval := time.Second / time.Duration(rate)
	n := int64(dur / interval)
	done := make(chan struct{})
	// 1 ns to 60 s at 3 significant digits.
	rec := &recorder{interval: interval, want: n, hist: hdrhistogram.New(1, 60_000_000_000, 3), done: done}
	pid := system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return rec }))
	defer system.Root.Stop(pid)
	start := time.Now().Add(time.Millisecond)
	rec.start = start // written before any probe is sent, so before the actor reads it
	for seq := int64(0); seq < n; seq++ {
		intended := start.Add(time.Duration(seq) * interval)
		// Sleep, not spin: on 2 cores a spinning pacer takes a core from the actors (tried: it
		// tripled p50 at 10k msg/s). A late wake-up counts against the round trip, since the
		// clock starts at the intended time, and the pacer then catches up without sleeping.
		if wait := time.Until(intended); wait > 0 {
			time.Sleep(wait)
		}
		system.Root.RequestWithCustomSender(echo, &messages.Probe{Seq: seq}, pid)
	}
	select {
	case <-done:
		return latencyResult{hist: rec.hist, elapsed: rec.last.Sub(start), n: n, received: n}, nil
	case <-time.After(drainLimit):
		// Replies are missing: the offered rate is past what the pair can carry. Report what
		// came back and how much was lost.
		res, err := system.Root.RequestFuture(pid, snapshot{}, 10*time.Second).Result()
		if err != nil {
			return latencyResult{}, fmt.Errorf("at %d msg/s, replies missing and the recorder does not answer: %w", rate, err)
		}
		return res.(latencyResult), nil
	}
}

func latency(args []string) (*report, error) {
	var secs float64
	flags, err := parseFlags("latency", args, func(fs *flag.FlagSet) {
		fs.Float64Var(&secs, "seconds", 0, "seconds per rate (default 5; --quick 1)")
	})
	if err != nil {
		return nil, err
	}
	rates := []int{1_000, 10_000, 100_000}
	if secs == 0 {
		secs = 5
	}
	if flags.quick {
		rates = []int{1_000}
		if secs == 5 {
			secs = 1
		}
	}
	dur := time.Duration(secs * float64(time.Second))
	system, _ := newSystem()
	addr, err := startRemoteNode(flags.processes)
	if err != nil {
		return nil, err
	}
	echo := actor.NewPID(addr, "echo0")
	warm := time.Second
	if flags.quick {
		warm = 200 * time.Millisecond
	}
	if _, err := offer(system, echo, 10_000, warm); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	rep := newReport("latency", flags.json)
	rep.Params["processes"] = flags.processes
	rep.Params["seconds_per_rate"] = secs
	rep.Params["message"] = "protobuf Probe{seq: int64}"
	rep.Params["serializer"] = "protobuf (Proto.Actor Go remote default)"
	rep.Params["transport"] = "gRPC stream over loopback TCP"
	rep.Params["timing"] = "round trip from the intended send time (no coordinated omission); HDR histogram, 3 significant digits"
	rep.Params["pacing"] = "a goroutine outside the actors sleeps until each intended send time (late wake-ups count against the round trip)"
	rep.Params["warm_up"] = fmt.Sprintf("10,000 msg/s for %v, untimed", warm)
	rep.Params["lost"] = fmt.Sprintf("probes with no reply %v after the last send (offered rate past capacity)", drainLimit)
	for _, rate := range rates {
		res, err := offer(system, echo, rate, dur)
		if err != nil {
			return nil, err
		}
		us := func(q float64) float64 { return float64(res.hist.ValueAtQuantile(q)) / 1e3 }
		r := newRow(fmt.Sprintf("%d msg/s", rate)).clients(1).throughput(res.received*2, res.elapsed)
		r.P50us, r.P99us = f64(us(50)), f64(us(99))
		r.with("rate", rate)
		r.with("p90_us", us(90))
		r.with("p999_us", us(99.9))
		r.with("max_us", float64(res.hist.Max())/1e3)
		r.with("sent", res.n)
		r.with("lost", res.n-res.received)
		rep.Rows = append(rep.Rows, r)
	}
	return rep, nil
}
