package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"rally.bench/peers/protoactor-go/messages"
)

// The max-throughput flow control: the receiver acknowledges every ackEvery messages and the
// sender keeps at most window unacknowledged (the bound every peer uses, so that Pekko's outbound
// queue, which drops past 3,072, never overflows; the figure is sustained rate, not queue growth).
const (
	ackEvery = 250
	window   = 2_000
)

// flooder sends want payloads to sink, at most window unacknowledged, and closes done when the
// sink has acknowledged them all.
type flooder struct {
	sink  *actor.PID
	data  []byte
	want  int64
	sent  int64
	acked int64
	done  chan struct{}
}

func (f *flooder) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case go_:
		f.fill(ctx)
	case *messages.Ack:
		f.acked = msg.Received
		if f.acked >= f.want {
			close(f.done)
			return
		}
		f.fill(ctx)
	}
}

func (f *flooder) fill(ctx actor.Context) {
	for f.sent < f.want && f.sent-f.acked < window {
		f.sent++
		ctx.Request(f.sink, &messages.Payload{Seq: f.sent, Data: f.data})
	}
}

type flowResult struct {
	elapsed, senderCPU, receiverCPU time.Duration
}

// flood runs one timed flow of n payloads of size bytes.
func flood(system *actor.ActorSystem, sink *actor.PID, n int64, size int, measureCPU bool) (flowResult, error) {
	var res flowResult
	if _, err := system.Root.RequestFuture(sink, &messages.Reset{AckEvery: ackEvery}, 10*time.Second).Result(); err != nil {
		return res, fmt.Errorf("resetting the receiver: %w", err)
	}
	done := make(chan struct{})
	f := &flooder{sink: sink, data: make([]byte, size), want: n, done: done}
	pid := system.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return f }))
	defer system.Root.Stop(pid)
	var recvCPU0 time.Duration
	var err error
	if measureCPU {
		if recvCPU0, err = queryCPU(system, sink); err != nil {
			return res, err
		}
	}
	cpu0 := processCPU()
	start := time.Now()
	system.Root.Send(pid, go_{})
	select {
	case <-done:
	case <-time.After(rowLimit):
		return res, fmt.Errorf("%d payloads of %d B not acknowledged within %v", n, size, rowLimit)
	}
	res.elapsed = time.Since(start)
	res.senderCPU = processCPU() - cpu0
	if measureCPU {
		recvCPU1, err := queryCPU(system, sink)
		if err != nil {
			return res, err
		}
		res.receiverCPU = recvCPU1 - recvCPU0
	}
	return res, nil
}

func maxThroughput(args []string) (*report, error) {
	var scale float64
	flags, err := parseFlags("max-throughput", args, func(fs *flag.FlagSet) {
		fs.Float64Var(&scale, "scale", 1, "multiply the message counts by this")
	})
	if err != nil {
		return nil, err
	}
	type setting struct {
		size int
		n    int64
	}
	settings := []setting{{100, 1_000_000}, {1024, 500_000}, {10 * 1024, 100_000}}
	if flags.quick {
		settings = []setting{{100, 50_000}, {1024, 20_000}, {10 * 1024, 5_000}}
	}
	system, _ := newSystem()
	addr, err := startRemoteNode(flags.processes)
	if err != nil {
		return nil, err
	}
	sink := actor.NewPID(addr, "sink")
	if _, err := flood(system, sink, 100_000, 100, false); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	rep := newReport("max-throughput", flags.json)
	rep.Params["processes"] = flags.processes
	rep.Params["flow_control"] = fmt.Sprintf("receiver acknowledges every %d; at most %d unacknowledged", ackEvery, window)
	rep.Params["message"] = "protobuf Payload{seq: int64, data: bytes}"
	rep.Params["serializer"] = "protobuf (Proto.Actor Go remote default)"
	rep.Params["transport"] = "gRPC stream over loopback TCP (server MaxRecvMsgSize raised to 64 MiB for 10 KiB batches)"
	rep.Params["warm_up"] = "100,000 x 100 B, untimed"
	rep.Params["mb"] = "10^6 bytes of payload"
	for _, s := range settings {
		n := int64(float64(s.n)*scale) / ackEvery * ackEvery
		if n < ackEvery {
			n = ackEvery
		}
		res, err := flood(system, sink, n, s.size, flags.processes == 2)
		if err != nil {
			return nil, err
		}
		r := newRow(fmt.Sprintf("%d B", s.size)).clients(1).throughput(n, res.elapsed)
		r.with("payload_bytes", s.size)
		r.with("mb_per_sec", float64(n)*float64(s.size)/res.elapsed.Seconds()/1e6)
		if flags.processes == 2 {
			r.with("sender_cpu_ms", float64(res.senderCPU.Microseconds())/1e3)
			r.with("receiver_cpu_ms", float64(res.receiverCPU.Microseconds())/1e3)
		} else {
			r.with("process_cpu_ms", float64(res.senderCPU.Microseconds())/1e3)
		}
		rep.Rows = append(rep.Rows, r)
	}
	return rep, nil
}
