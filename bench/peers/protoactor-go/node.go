package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"

	"rally.bench/peers/protoactor-go/messages"
)

// maxEchoes is how many echo actors a node spawns: the largest client count of remote-ping-pong.
const maxEchoes = 30

// maxFrame is the gRPC receive limit: 1,000 messages of 10 KiB plus headers fit.
const maxFrame = 64 << 20

// childStartLimit bounds how long the second node may take to start and print its address.
const childStartLimit = 30 * time.Second

// newSystem starts an actor system with remoting on 127.0.0.1 and an OS-chosen port. Logging
// goes to stderr at warning level so that stdout carries only the report.
func newSystem() (*actor.ActorSystem, *remote.Remote) {
	system := newLocalSystem()
	// gRPC refuses frames over 4 MiB by default, and the endpoint writer batches up to 1,000
	// messages per frame: 10 KiB payloads need a larger limit.
	r := remote.NewRemote(system, remote.Configure("127.0.0.1", 0,
		remote.WithServerOptions(grpc.MaxRecvMsgSize(maxFrame))))
	r.Start()
	return system, r
}

// newLocalSystem starts an actor system without remoting that logs warnings only, to stderr.
func newLocalSystem() *actor.ActorSystem {
	return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}))
}

// echoActor replies to the sender with the same message (remote-ping-pong, latency).
type echoActor struct{}

func (echoActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *messages.Ping, *messages.Probe:
		ctx.Respond(msg)
	case *messages.CpuQuery:
		ctx.Respond(&messages.CpuReply{CpuNs: processCPU().Nanoseconds()})
	}
}

// sinkActor is the max-throughput receiver: it counts payloads and acknowledges every ackEvery.
type sinkActor struct {
	received int64
	ackEvery int64
}

func (s *sinkActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *messages.Payload:
		s.received++
		if s.received%s.ackEvery == 0 {
			ctx.Respond(&messages.Ack{Received: s.received})
		}
	case *messages.Reset:
		s.received, s.ackEvery = 0, msg.AckEvery
		ctx.Respond(&messages.Ack{Received: 0})
	case *messages.CpuQuery:
		ctx.Respond(&messages.CpuReply{CpuNs: processCPU().Nanoseconds()})
	}
}

// startNodeActors spawns the echo actors "echo0".."echo29" and the receiver "sink".
func startNodeActors(system *actor.ActorSystem) error {
	for i := 0; i < maxEchoes; i++ {
		if _, err := system.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return echoActor{} }), fmt.Sprintf("echo%d", i)); err != nil {
			return err
		}
	}
	_, err := system.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return &sinkActor{ackEvery: 1} }), "sink")
	return err
}

// runNodeChild is the "node" subcommand: the second node of a two-process run. It prints
// "READY <address>" and serves until its stdin closes (the parent exited or is done).
func runNodeChild() {
	system, _ := newSystem()
	if err := startNodeActors(system); err != nil {
		fmt.Fprintf(os.Stderr, "protoactor-bench node: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("READY %s\n", system.Address())
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

var (
	childrenMu sync.Mutex
	children   []*exec.Cmd
)

// startRemoteNode gives the address of the second node: a child process (processes == 2) or a
// second actor system in this process (processes == 1).
func startRemoteNode(processes int) (string, error) {
	switch processes {
	case 1:
		system, _ := newSystem()
		if err := startNodeActors(system); err != nil {
			return "", err
		}
		return system.Address(), nil
	case 2:
		return startChild()
	default:
		return "", fmt.Errorf("--processes must be 1 or 2, not %d", processes)
	}
}

func startChild() (string, error) {
	return startChildWith("node")
}

// startChildWith starts this harness again as a child process with the given arguments and
// returns the address it prints on its "READY <address>" line.
func startChildWith(args ...string) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	_ = stdin // closed by stopChildren; the child exits when it reads EOF
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("starting the echo node: %w", err)
	}
	childrenMu.Lock()
	children = append(children, cmd)
	childrenMu.Unlock()
	lines := make(chan string, 1)
	go func() {
		// Skip what a library prints before the READY line (Proto.Actor's automanaged provider
		// starts an HTTP server that announces itself on stdout).
		reader := bufio.NewReader(stdout)
		for {
			line, err := reader.ReadString('\n')
			if strings.HasPrefix(line, "READY ") || err != nil {
				lines <- line
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case line := <-lines:
		addr, ok := strings.CutPrefix(strings.TrimSpace(line), "READY ")
		if !ok {
			return "", fmt.Errorf("echo node did not start (said %q)", line)
		}
		return addr, nil
	case <-time.After(childStartLimit):
		return "", fmt.Errorf("echo node did not start within %v", childStartLimit)
	}
}

// stopChildren kills any child node (it holds no state worth a graceful stop) and reaps it.
func stopChildren() {
	childrenMu.Lock()
	defer childrenMu.Unlock()
	for _, cmd := range children {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}
	children = nil
}

// commonFlags are the flags every scenario accepts.
type commonFlags struct {
	json      bool
	quick     bool
	processes int
}

func parseFlags(scenario string, args []string, extra func(*flag.FlagSet)) (commonFlags, error) {
	var c commonFlags
	fs := flag.NewFlagSet(scenario, flag.ContinueOnError)
	fs.BoolVar(&c.json, "json", false, "print one JSON object")
	fs.BoolVar(&c.quick, "quick", false, "a smoke run of a few seconds")
	fs.IntVar(&c.processes, "processes", 2, "2: the second node is a child process; 1: both nodes in this process")
	if extra != nil {
		extra(fs)
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.quick {
		rowLimit = 30 * time.Second
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	return c, nil
}

// queryCPU asks a (possibly remote) actor for its process CPU time.
func queryCPU(system *actor.ActorSystem, pid *actor.PID) (time.Duration, error) {
	res, err := system.Root.RequestFuture(pid, &messages.CpuQuery{}, 10*time.Second).Result()
	if err != nil {
		return 0, fmt.Errorf("cpu query: %w", err)
	}
	reply, ok := res.(*messages.CpuReply)
	if !ok {
		return 0, fmt.Errorf("cpu query: unexpected reply %T", res)
	}
	return time.Duration(reply.CpuNs), nil
}
