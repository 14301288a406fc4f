package bench

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// Machine describes where a bench ran.
type Machine struct {
	Date      time.Time
	Commit    string // short hash, plus " (dirty)" with uncommitted changes
	GoVersion string
	Cores     int    // as nproc counts them
	CPU       string // the model name
	Memory    string // MemTotal
	Command   string
}

// DescribeMachine gathers the machine's description; what cannot be found
// reads "unknown".
func DescribeMachine(command string) Machine {
	m := Machine{Date: time.Now(), GoVersion: runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH,
		Cores: runtime.NumCPU(), Commit: "unknown", CPU: "unknown", Memory: "unknown", Command: command}
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
		// BENCHMARKS.md itself is what a run rewrites: it does not make
		// the code dirty.
		if st, err := exec.Command("git", "status", "--porcelain", "--", ".", ":(exclude)BENCHMARKS.md").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
			m.Commit += " (dirty)"
		}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				var kb int64
				if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err == nil {
					m.Memory = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
				}
			}
		}
	}
	return m
}

// WriteText prints the report for a terminal: the machine, the table, the
// details and what failed.
func (r *Report) WriteText(w io.Writer, m Machine) error {
	mode := "full"
	if r.Quick {
		mode = "quick (BENCH_QUICK=1: one short run per row; figures indicative only)"
	}
	fmt.Fprintf(w, "\njobplane bench, %s run: %s, commit %s, %s, %d cores, %s, took %v\n\n",
		mode, m.Date.Format(time.DateTime), m.Commit, m.GoVersion, m.Cores, m.Memory, r.Duration.Round(time.Second))
	if err := r.Table.WriteText(w); err != nil {
		return err
	}
	for _, d := range r.Details {
		if strings.HasPrefix(d.Title, "Row 6") {
			continue // already on the terminal, from go test
		}
		fmt.Fprintf(w, "\n%s\n%s", d.Title, d.Text)
	}
	for _, f := range r.Failed {
		fmt.Fprintf(w, "\nFAILED: %s\n", f)
	}
	return nil
}

// WriteMarkdown writes the report as BENCHMARKS.md.
func (r *Report) WriteMarkdown(w io.Writer, m Machine) error {
	var b strings.Builder
	b.WriteString("# Benchmarks\n\n")
	b.WriteString("Written by `make bench` (the harness in [`bench/`](bench)); every full run rewrites this file. ")
	b.WriteString("Figures are from one machine at one commit: compare rows measured in the same run, and each row with its floor.\n\n")
	fmt.Fprintf(&b, "- Date: %s\n", m.Date.Format(time.RFC3339))
	fmt.Fprintf(&b, "- Commit: %s\n", m.Commit)
	fmt.Fprintf(&b, "- Go: %s\n", m.GoVersion)
	fmt.Fprintf(&b, "- Cores (nproc): %d (%s)\n", m.Cores, m.CPU)
	fmt.Fprintf(&b, "- Memory (MemTotal): %s\n", m.Memory)
	fmt.Fprintf(&b, "- Command: `%s`\n", m.Command)
	fmt.Fprintf(&b, "- Duration: %v\n\n", r.Duration.Round(time.Second))
	b.WriteString("## Results\n\n")
	b.WriteString("Median and spread (min–max) over the runs; Floor is the same figure of the floor, measured alternately in the same run; Ratio is median over floor median. Targets are DESIGN.md §6's.\n\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	if err := r.Table.WriteMarkdown(w); err != nil {
		return err
	}
	b.Reset()
	if len(r.Failed) > 0 {
		b.WriteString("\n**Could not run:**\n\n")
		for _, f := range r.Failed {
			fmt.Fprintf(&b, "- %s\n", f)
		}
	}
	b.WriteString("\n" + rowNotes)
	for _, d := range r.Details {
		fmt.Fprintf(&b, "\n## %s\n\n```\n%s```\n", d.Title, d.Text)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// rowNotes says what each row measures.
const rowNotes = `## What each row measures

The system under test is ` + "`bin/jobplane jobmanager`" + ` as a process of its own, on an embedded etcd member in a temporary directory, with its default timings and ` + "`--log-level warn`" + ` (logs to a file). TaskExecutors are ` + "`sdk/taskexecutor`" + ` (wired by ` + "`server/component`" + `) hosted in the bench process, each on a loopback port and with HTTP clients of its own, finding the ResourceManager through the HA store the JobManager serves. Clients are connect-go DispatcherService clients in the bench process. Every job id is fresh.

- **Floor** (rows 1 and 3): a connect-go server in a process of its own (the bench binary re-executed) whose SubmitJob builds the execution plan as the Dispatcher does (copy of the graph, SHA-256 digest of its deterministic encoding, submit time) and makes one fenced ` + "`PutExecutionPlan`" + ` on its own embedded member, whose session leads the election ` + "`jobmanager`" + `: the one-write floor (1b, 3). It runs beside the JobManager and is measured alternately with it, with the same client and protocol. **Lifecycle floor** (1a): the same process, which after answering SubmitJob also deploys the job's one task with one ` + "`SubmitTask`" + ` (h2c, as between the JobManager and the bench's TaskExecutors) to a stand-in TaskExecutor in the bench process, which answers at once and reports the attempt FINISHED with one ` + "`UpdateTaskExecutionState`" + `, on which the floor makes the fenced finish write (` + "`FinishJob`" + `, the Dispatcher's write of a result: result stored clean and plan removed in one transaction): exactly what the contract asks of a job that runs to its end, without the job's own election, slot requests and offers, heartbeats or slot release. Both sides answer SubmitJob once the plan is written and finish the job afterwards, so 1a compares SubmitJob answers with SubmitJob answers; a job is done, on either side, once its finish write is acknowledged.
- **1a/1b**: 64 clients submit one-vertex ` + "`noop`" + ` jobs for 3 s per run, 3 runs, floor first in each round, after waiting (at most 3 s) for the JobManager to go quiet (the note says when it did not); acks/s counts answers received within the run, p50/p99 are of SubmitJob. 1a has enough slots that no job waits (the note gives the fewest free slots seen), and is compared with the lifecycle floor: before each floor run the bench waits (at most 3 s) until the floor has finished every job it acknowledged, and the note gives the jobs each side had acknowledged but not finished at a run's end (median; the JobManager's from GetClusterOverview's running jobs); 1b is the default cluster (2 TaskExecutors x 4 slots), where jobs pile up over the runs. A fresh JobManager and floor per protocol and cluster. The note's CPU per ack is the CPU time the server (JobManager or floor) and the bench process (its clients, and on the JobManager's side its TaskExecutors) used during the runs, divided by the acks (median over the runs); the lifecycle floor's stand-in TaskExecutor is on its bench side, as the TaskExecutors are on the JobManager's. All of them share the machine's cores, so 0.8x the floor's rate leaves at most 1.25x the floor's total CPU per ack (server plus bench) for everything a job costs while it is submitted and run. **1r**: raw etcd puts of the same plan bytes from 64 goroutines on the floor's member, one 3 s run per case.
- **2**: 64 h2c clients for 60 s on the default cluster, 3 runs, each on a fresh JobManager; acks/s per 5 s window: each run's first and last window, and its slowest window over its fastest. Flat means the last window is as fast as the first, and none much slower, while tens of thousands of jobs wait for slots. Every run's windows are listed below the table. The GC row is the JobManager's ` + "`go_cpu_classes_gc_total_cpu_seconds_total`" + ` (read from its /metrics before and after the run: the Go runtime's estimate of its collector's CPU) over its CPU time from /proc in the same span; the target is issue 33's, GC ≤ 10% of the CPU.
- **3**: one TaskExecutor with one slot, idle. RUNNING is when the task's invokable started (recorded in the TaskExecutor); FINISHED is when GetJobResult(wait) returned; slot free is when GetClusterOverview, polled every millisecond, shows the slot available. The back-to-back figure submits each job as soon as the previous one's result arrived, so the next task can only start on the freed slot. The floor is the SubmitJob round trip of one client; the contract floor adds two empty unary round trips to the floor process (GetClusterOverview, answered at once, p50 of as many calls), for the two calls the contract requires after the acknowledgement before a task can run: the slot's allocation (SubmitTask refuses a slot not allocated to the job) and the deployment.
- **4**: one job of two vertices of parallelism 1000 joined ALL_TO_ALL PIPELINED (one region of 2000 subtasks) on 40 TaskExecutors x 50 slots; all deployed is when the 2000th invokable started; RPCs are counted as in row 5, from the submission until the slots are free again.
- **5**: 3 runs, each on a fresh JobManager and TaskExecutors, each figure one per run: 10,000 one-task jobs whose task blocks until canceled, on 40 TaskExecutors x 250 slots, submitted by 64 clients; reaching them all is bounded at 75 s, and the steady state is measured at whatever ran by then (deployment of the rest goes on meanwhile). JM CPU is utime+stime of the JobManager process over 3 windows of 3 s with no client calls (the run's median); RSS is VmRSS after them; RPCs are counted by interceptors in the TaskExecutors (calls to the ResourceManager and JobMasters, calls from them, and calls to the HA store the JobManager serves; a stream counts once). Then one client alternates GetClusterOverview and ListJobs (page size 100) every 10 ms for 3 s (p50 and p99 over the run's calls), each call bounded at 2 s (a failed call counts with its duration). FAILED is the overview's count; the note says whether every task kept running through the steady state with one task start per job (more starts than jobs means tasks were stopped and run again), and whether the JobManager kept its leadership, and gives the figures of any run where not. Then as many jobs again are submitted (bounded at 75 s), which wait for slots since every slot is taken; once the JobManager settles (below 0.1 cores, at most 10 s), its CPU is measured over 3 windows of 3 s with no client calls (the run's median), and its RSS after them. Then every job is canceled (64 clients), bounded at 30 s.
- **6**: ` + "`go test -run '^$' -bench . -benchmem -count 3`" + ` of ` + "`server/internal/scheduler`" + ` and ` + "`server/hastore/...`" + ` (verbatim below); the store benchmarks measure raw etcd puts on the same member in the same run, shown as their floor.
- **9**: ` + "`BenchmarkCheckpoints`" + ` of ` + "`internal/failover`" + ` (one run; verbatim in row 6's output), on real processes: one etcd member, one jobmanager on it (JobMasters and the store), TaskExecutors running the built-in ` + "`count`" + `. 9a: one job of 100 subtasks counting every 10 ms on 2 TaskExecutors x 50 slots, checkpointing every second, over 60 s: the jobmanager's cores (utime+stime), beside the same job without checkpoints on a cluster of its own (the floor); store writes per checkpoint is the jobmanager's fenced store writes (` + "`jobplane_hastore_write_duration_seconds`" + ` count) over its completed checkpoints in the window; store-p50-ms is the time from a checkpoint's last acknowledgement to its durable write (` + "`jobplane_checkpoint_store_duration_seconds`" + ` over the window), interpolated in its histogram bucket. 9b: 1,000 one-subtask jobs (counting every second) on 10 TaskExecutors, each checkpointing every 10 s, over 60 s: cores and RSS growth (VmRSS at the window's start vs its end), beside the same jobs without checkpoints. 9c: 20 runs on 3 TaskExecutors x 1 slot, each a one-subtask job counting every 10 ms and checkpointing every second whose TaskExecutor is SIGKILLed at a random phase once 2 checkpoints completed; lost work is the SIGKILL's time minus the ack_time of the checkpoint the next attempt restored (its output's restored_from); the time until that attempt runs (the loss noticed, restart, deploy) is in the note, not lost work.
- **10**: 3 runs, each on a fresh JobManager started with ` + "`--debug-listen`" + ` on a free loopback port and no TaskExecutor, so that every job waits for slots: 64 h2c clients submit N one-task ` + "`noop`" + ` jobs (100,000; 2,000 in quick mode) in two halves. Idle (once it leads), and after each half once it is quiet (under 0.1 cores, at most 10 s), the bench reads ` + "`runtime.MemStats`" + ` from ` + "`/debug/pprof/heap?gc=1&debug=1`" + ` (a forced GC first) and the JobManager's VmRSS. Per waiting job: live heap is (HeapAlloc with N waiting − HeapAlloc idle) / N, and HeapInuse, heap objects and VmRSS the same way; the RSS row is VmRSS with all N waiting. The note gives, per run, the jobs acknowledged and the overview's count of jobs not terminal, the second half's live heap per job alone (a figure far from the row's means fixed costs weigh in it), and the peak RSS while submitting. Heap goal is NextGC and heap kept is HeapInuse + HeapIdle − HeapReleased, both with all N waiting: at GOGC=100 the goal is twice the live heap, and the runtime keeps about 10% over it resident. Then 3 more runs do the same with the JobManager's environment holding GOMEMLIMIT=240MiB, the Go runtime's soft memory limit, which makes the collector run before the heap reaches twice the live heap: the row gives their RSS with all N waiting, and its note how long their submissions took against the runs without the limit. With BENCH_HEAP_PROFILE=dir set, each run saves the JobManager's heap profile and its /proc status and smaps into dir. Targets are issue 33's: ≤ 2 KiB of heap per waiting job, 100,000 waiting jobs in ≤ 300 MiB.
- **12**: ` + "`ui/bench/firstpage.mjs`" + ` (run by ` + "`make bench`" + ` after the Go benchmarks; its lines join row 6's output): a standalone with ` + "`--submit-rate 0`" + ` and 10,000 one-task ` + "`sleep`" + ` jobs waiting for its slots (500 in quick mode), submitted by 16 clients; then 5 runs, each in a new context of Debian's chromium, headless, 1280×800: the jobs page until its first row is shown, the cluster page until it names the leader, each from the navigation's start as the page's own clock (` + "`performance.now()`" + `) tells it. Floor: the same jobs page with its script blocked, its DOMContentLoaded, plus one ListJobs of the page's size (50) fetched from it: what any page that shows those jobs waits for. Target is issue 34's: the first page drawn within 1 s.
`
