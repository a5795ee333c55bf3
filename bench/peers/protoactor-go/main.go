// Command protoactor-bench runs Rally's benchmark scenarios (docs/benchmarks.md) on Proto.Actor Go,
// with the same definitions and counting as rally-bench, and prints the same report: a plain
// table, or one JSON object with --json.
//
//	protoactor-bench remote-ping-pong [--processes 2|1] [--quick] [--json]
//	protoactor-bench max-throughput   [--processes 2|1] [--quick] [--json]
//	protoactor-bench latency          [--processes 2|1] [--quick] [--json]
//	protoactor-bench local-ping-pong  [--quick] [--json]
//	protoactor-bench grain-ping       [--parallelism 8,32,128,512] [--seconds S] [--quick] [--json]
//	protoactor-bench activation       [--activations 100000,1000000] [--workers 64] [--quick] [--json]
//
// With --processes 2 (the default) the harness starts itself as the second node ("node"
// subcommand) and talks to it over loopback TCP.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"
)

// protoactorVersion is the pinned module version (go.mod); it goes into every report's params.
const protoactorVersion = "github.com/asynkron/protoactor-go v0.0.0-20240822202345-3c0e61ca19c9"

// runLimit bounds a whole invocation: no scenario here should get near it, so reaching it means
// the harness is stuck and it exits non-zero instead of hanging.
const runLimit = 15 * time.Minute

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	scenario, args := os.Args[1], os.Args[2:]
	switch scenario {
	case "node":
		runNodeChild()
		return
	case "grain-member":
		runGrainMember(args)
		return
	}
	watchdog := time.AfterFunc(runLimit, func() {
		fail(fmt.Errorf("%s did not finish within %v", scenario, runLimit))
	})
	defer watchdog.Stop()

	var err error
	var rep *report
	switch scenario {
	case "remote-ping-pong":
		rep, err = remotePingPong(args)
	case "max-throughput":
		rep, err = maxThroughput(args)
	case "latency":
		rep, err = latency(args)
	case "local-ping-pong":
		rep, err = localPingPong(args)
	case "grain-ping":
		rep, err = grainPing(args)
	case "activation":
		rep, err = activation(args)
	case "-h", "--help", "help":
		usage()
		return
	default:
		usage()
		err = fmt.Errorf("unknown scenario %q", scenario)
	}
	if err != nil {
		fail(err)
	}
	rep.print()
	stopChildren()
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: protoactor-bench <remote-ping-pong|max-throughput|latency|local-ping-pong|grain-ping|activation> [--quick] [--json] [--processes 2|1]")
}

// fail reports err on stderr, stops any child node, and exits non-zero.
func fail(err error) {
	fmt.Fprintf(os.Stderr, "protoactor-bench: error: %v\n", err)
	stopChildren()
	os.Exit(1)
}

// machine is the report's machine object.
type machine struct {
	Cores int    `json:"cores"`
	CPU   string `json:"cpu"`
}

func currentMachine() machine {
	cpu := "unknown"
	if text, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(text), "\n") {
			if strings.HasPrefix(line, "model name") {
				if i := strings.Index(line, ":"); i >= 0 {
					cpu = strings.TrimSpace(line[i+1:])
				}
				break
			}
		}
	}
	return machine{Cores: runtime.NumCPU(), CPU: cpu}
}

// row is one result row; the fixed fields of the contract plus scenario-specific extras.
type row struct {
	Label      string
	Clients    *int64
	TotalMsgs  *int64
	ElapsedMs  *float64
	MsgsPerSec *float64
	P50us      *float64
	P99us      *float64
	Extra      map[string]any
	extraOrder []string
}

func newRow(label string) *row { return &row{Label: label, Extra: map[string]any{}} }

func (r *row) clients(n int) *row {
	v := int64(n)
	r.Clients = &v
	return r
}

// throughput sets total, elapsed and the derived rate.
func (r *row) throughput(total int64, elapsed time.Duration) *row {
	ms := float64(elapsed.Nanoseconds()) / 1e6
	rate := 0.0
	if elapsed > 0 {
		rate = float64(total) / elapsed.Seconds()
	}
	r.TotalMsgs, r.ElapsedMs, r.MsgsPerSec = &total, &ms, &rate
	return r
}

func (r *row) with(key string, value any) *row {
	if _, ok := r.Extra[key]; !ok {
		r.extraOrder = append(r.extraOrder, key)
	}
	r.Extra[key] = value
	return r
}

func (r *row) MarshalJSON() ([]byte, error) {
	m := map[string]any{
		"label": r.Label, "clients": r.Clients, "total_msgs": r.TotalMsgs, "elapsed_ms": r.ElapsedMs,
		"msgs_per_sec": r.MsgsPerSec, "p50_us": r.P50us, "p99_us": r.P99us,
	}
	for k, v := range r.Extra {
		m[k] = v
	}
	return json.Marshal(m)
}

type report struct {
	Scenario  string         `json:"scenario"`
	Framework string         `json:"framework"`
	Machine   machine        `json:"machine"`
	Params    map[string]any `json:"params"`
	Rows      []*row         `json:"rows"`
	json      bool
	// pingPongTable prints the Akka.NET RemotePingPong columns instead of the generic table.
	pingPongTable bool
}

func newReport(scenario string, jsonOut bool) *report {
	return &report{
		Scenario:  scenario,
		Framework: "protoactor-go",
		Machine:   currentMachine(),
		Params:    map[string]any{"protoactor_version": protoactorVersion, "go_version": runtime.Version(), "gomaxprocs": runtime.GOMAXPROCS(0)},
		json:      jsonOut,
	}
}

func (rep *report) print() {
	if rep.json {
		out, err := json.Marshal(rep)
		if err != nil {
			fail(err)
		}
		fmt.Println(string(out))
		return
	}
	fmt.Printf("# %s (%s) on %d cores, %s\n", rep.Scenario, rep.Framework, rep.Machine.Cores, rep.Machine.CPU)
	keys := make([]string, 0, len(rep.Params))
	for k := range rep.Params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("#   %s = %v\n", k, rep.Params[k])
	}
	if rep.pingPongTable {
		fmt.Println("Num clients, Total [msg], Msgs/sec, Total [ms]")
		for _, r := range rep.Rows {
			fmt.Printf("%d, %d, %.0f, %.0f\n", *r.Clients, *r.TotalMsgs, *r.MsgsPerSec, *r.ElapsedMs)
		}
		return
	}
	var extra []string
	if len(rep.Rows) > 0 {
		extra = rep.Rows[0].extraOrder
	}
	fmt.Print("label, Total [msg], Msgs/sec, Total [ms], p50 [us], p99 [us]")
	for _, k := range extra {
		fmt.Print(", ", k)
	}
	fmt.Println()
	for _, r := range rep.Rows {
		fmt.Printf("%s, %s, %s, %s, %s, %s", r.Label, optInt(r.TotalMsgs), optFloat(r.MsgsPerSec, 0), optFloat(r.ElapsedMs, 1), optFloat(r.P50us, 1), optFloat(r.P99us, 1))
		for _, k := range extra {
			switch v := r.Extra[k].(type) {
			case float64:
				fmt.Printf(", %.2f", v)
			case nil:
				fmt.Print(", -")
			default:
				fmt.Printf(", %v", v)
			}
		}
		fmt.Println()
	}
}

func optInt(v *int64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(*v)
}

func optFloat(v *float64, decimals int) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.*f", decimals, *v)
}

func f64(v float64) *float64 { return &v }

// processCPU is this process's user + system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
