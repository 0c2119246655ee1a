package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/worker"
)

// yardstickScenario is the report's section of the bare net/http JSON handler (bareHandler)
// measured on its own, before the first scenario that reports a ratio to it, when the ceiling
// scenario, which measures it beside Shoal's beat, has not run yet (make bench runs the ceiling
// first). Its CPU per request is the run's yardstick, which the steady and capacity scenarios'
// server and fleet figures are divided by: a ratio to a handler measured on the same machine in
// the same run travels between machines; a figure in microseconds does not.
const yardstickScenario = "yardstick"

// bareYardstick is what the bare handler did under the ceiling's load: requests a second, CPU
// microseconds a request, from /proc, and bytes allocated a request, from its Go runtime (0 if
// it reported none), failed requests counted in both (they cost too).
type bareYardstick struct {
	rate, cpuUS, allocB float64
}

// yardstickUsers are the scenarios whose figures are ratios to a yardstick they do not measure
// themselves (the ceiling measures its own, which becomes the run's if it comes first).
var yardstickUsers = []string{"steady", "capacity"}

// The ratios to the bare handler each scenario reports, and the targets on them: a worker call
// of the steady mix costs the server at most 3x a bare handler's request at 100,000 equivalent
// workers, where fewer calls share each wake-up and each journal write, and at most 2x at the
// capacity ladder's 500,000 step; the fleet that generates the load costs no more than the bare
// handler, so that it is not what limits a step; and the server allocates at most 3 kB a
// request over its whole process (the Go runtime's count of allocated bytes, from its metrics).
const (
	serverRatioFigure = "server CPU per request / bare net/http CPU per request"
	fleetRatioFigure  = "fleet CPU per request / bare net/http CPU per request"
	allocFigure       = "server allocations per request (whole process)"
	bareAllocFigure   = "bare net/http allocations per request"
	allocRatioFigure  = "server allocations per request / bare net/http allocations per request"
	fleetCPUFigure    = "fleet CPU per request (the bench process and its fleet processes)"
	steadyRatioLimit  = 3.0
	ladderRatioLimit  = 2.0
	fleetRatioLimit   = 1.0
	allocLimitBytes   = 3000
)

// measureYardstick measures the bare handler alone (measureBare), with set.CeilingClients
// clients whose bodies have a beat's shape, and records it in sc.
func measureYardstick(ctx context.Context, set plan, sc *scenarioReport) (*bareYardstick, error) {
	bodies, err := yardstickBodies(set.CeilingClients)
	if err != nil {
		return nil, err
	}
	y, err := measureBare(ctx, set, bodies, sc)
	if err != nil {
		return nil, err
	}
	sc.figure("concurrent clients", float64(len(bodies)), "clients")
	if y.cpuUS == 0 {
		return nil, errors.New("the bare net/http handler answered no request")
	}
	return y, nil
}

// measureBare runs the bare handler (bareHandler) in a process of its own on the server's core,
// so that its CPU per request comes from /proc as the server's does, loaded by one client per
// body for set.ceilingDuration, and records in sc what it did. Its CPU per request is 0 if it
// answered no request.
func measureBare(ctx context.Context, set plan, bodies [][]byte, sc *scenarioReport) (*bareYardstick, error) {
	bare, err := startBare(ctx, set)
	if err != nil {
		return nil, err
	}
	before, err := readProc(bare.cmd.Process.Pid)
	if err != nil {
		bare.stop()
		return nil, err
	}
	ok, secs, failed := loadGenerate(ctx, bare.url, bodies, set.ceilingDuration)
	after, err := readProc(bare.cmd.Process.Pid)
	bare.stop()
	if err != nil {
		return nil, err
	}
	y := &bareYardstick{rate: float64(ok) / secs}
	sc.figure("bare net/http JSON handler", y.rate, "req/s")
	sc.figure("bare net/http errors", float64(failed), "requests")
	if ok > 0 {
		y.cpuUS = (after.CPUSeconds - before.CPUSeconds) / float64(ok+failed) * 1e6
		sc.figure("bare net/http CPU per request", y.cpuUS, "µs")
		if b, reported := bareAllocated(bare.out.String()); reported {
			y.allocB = float64(b) / float64(ok+failed)
			sc.figure(bareAllocFigure, y.allocB, "bytes")
		}
	}
	return y, nil
}

// yardstickBodies are n beats' bodies as Shoal's worker sends them, each with a worker_info of
// its own: the bare handler decodes whatever JSON object it gets, so the task need not exist.
func yardstickBodies(n int) ([][]byte, error) {
	const password = "yardstick-password"
	run := "000000000000000000000000"
	bodies := make([][]byte, n)
	for i := range n {
		w, err := worker.New(worker.Config{ServerURL: "http://127.0.0.1:1", Username: "yardstick", Password: password,
			UniqueKey: worker.NewUniqueKey(fmt.Sprintf("bc%06d", i))}, &worker.SimSource{})
		if err != nil {
			return nil, err
		}
		task := i
		if bodies[i], err = json.Marshal(protocol.Request{Password: password, WorkerInfo: w.Info(), RunID: &run, TaskID: &task}); err != nil {
			return nil, err
		}
	}
	return bodies, nil
}

// ratioFigures records, beside a scenario's whole-run figures, the server's and the fleet's CPU
// per request as ratios to the bare handler's and the server's allocated bytes per request
// (allocated, from the server's metrics, over requests). It returns the two ratios and the
// bytes, each nil if it could not be measured.
func ratioFigures(sc *scenarioReport, bare *bareYardstick, allocated float64, requests int64) (server, fleet, alloc *float64) {
	if requests > 0 && allocated > 0 {
		alloc = new(allocated / float64(requests))
		sc.figure(allocFigure, *alloc, "bytes")
	}
	if bare == nil || bare.cpuUS <= 0 {
		return server, fleet, alloc
	}
	sc.figure("bare net/http CPU per request (this run's yardstick)", bare.cpuUS, "µs")
	if alloc != nil && bare.allocB > 0 {
		sc.figure(bareAllocFigure+" (this run's yardstick)", bare.allocB, "bytes")
		sc.figure(allocRatioFigure, *alloc/bare.allocB, "x")
	}
	if v, ok := sc.value("server CPU per request"); ok {
		server = new(v / bare.cpuUS)
		sc.figure(serverRatioFigure, *server, "x")
	}
	if v, ok := sc.value(fleetCPUFigure); ok {
		fleet = new(v / bare.cpuUS)
		sc.figure(fleetRatioFigure, *fleet, "x")
	}
	return server, fleet, alloc
}
