package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/protocol/apiclient"
	"github.com/shoal-chess/shoal/worker"
)

// benchCeiling measures a bare net/http JSON handler and Shoal's beat with the same load
// generator, one after the other, and the ratio of the two. The bare handler's figures become
// the run's yardstick (set.bare) unless one was measured before.
func benchCeiling(ctx context.Context, set *plan, sc *scenarioReport, stderr io.Writer) error {
	ratio, cpuRatio := (*float64)(nil), (*float64)(nil)
	defer func() {
		sc.target("beat throughput / bare net/http", ratio, "ratio", ">= 0.5", atLeast(0.5))
		sc.target("server CPU per beat / bare net/http CPU per request", cpuRatio, "x", "<= 3", atMost(3))
		sc.explainUnmet(*set)
	}()
	clients := set.CeilingClients
	s, err := startBenchServer(ctx, *set, clients, stderr)
	if err != nil {
		return err
	}
	defer s.stop()

	// One task per client, for valid beats.
	ids, err := s.submitRuns(ctx, 1)
	if err != nil {
		return err
	}
	bodies := make([][]byte, clients)
	for i := range clients {
		bodies[i], err = beatBody(ctx, s, i)
		if err != nil {
			return fmt.Errorf("get a task for beat (run %s): %w", ids[0], err)
		}
	}

	bare, err := measureBare(ctx, *set, bodies, sc)
	if err != nil {
		return err
	}
	if set.bare == nil && bare.cpuUS > 0 {
		set.bare = bare
	}
	before, err := readServer(s.cmd.Process.Pid)
	if err != nil {
		return err
	}
	profiled := profileDuring(ctx, s, *set, "ceiling", time.Second, set.ceilingDuration-2*time.Second)
	beatOK, beatSecs, beatErrs := loadGenerate(ctx, s.base+"/api/beat", bodies, set.ceilingDuration)
	sc.Profile = <-profiled
	after, err := readServer(s.cmd.Process.Pid)
	if err != nil {
		return err
	}
	beatRate := float64(beatOK) / beatSecs
	sc.figure("shoal beat", beatRate, "req/s")
	sc.figure("shoal beat errors (non-200 or task not alive)", float64(beatErrs), "requests")
	sc.figure("concurrent clients", float64(clients), "clients")
	if bare.rate > 0 {
		r := beatRate / bare.rate
		sc.figure("beat / bare ratio", r, "ratio")
		ratio = &r
	}
	// CPU per request, failed ones counted (they cost CPU too): /proc counts in hundredths of a
	// second, well under a percent of the seconds a ceiling leg burns. Shoal's figure includes
	// its CPU profile's sampling and its embedded database's background work.
	if bare.cpuUS > 0 && beatOK > 0 {
		beatUS := (after.CPUSeconds - before.CPUSeconds) / float64(beatOK+beatErrs) * 1e6
		sc.figure("shoal CPU per beat", beatUS, "µs")
		cpuRatio = new(beatUS / bare.cpuUS)
		sc.figure("shoal CPU per beat / bare CPU per request", *cpuRatio, "x")
	}
	return nil
}

// beatBody takes a task for worker i through request_task and returns the body of a beat for it.
func beatBody(ctx context.Context, s *benchServer, i int) ([]byte, error) {
	w, err := worker.New(worker.Config{ServerURL: s.base, Username: s.users.Workers.Name,
		Password: s.users.Workers.Password, UniqueKey: worker.NewUniqueKey(fmt.Sprintf("bc%06d", i))}, &worker.SimSource{})
	if err != nil {
		return nil, err
	}
	info := w.Info()
	c := &apiclient.Client{Server: s.base, HTTP: http.DefaultClient}
	for attempt := 0; ; attempt++ {
		var task protocol.TaskReply
		err := c.Post(ctx, "/api/request_task", protocol.Request{Password: s.users.Workers.Password, WorkerInfo: info}, &task)
		if err != nil {
			return nil, fmt.Errorf("request_task: %w", err)
		}
		if task.Run != nil && task.TaskID != nil {
			return json.Marshal(protocol.Request{Password: s.users.Workers.Password, WorkerInfo: info,
				RunID: &task.Run.ID, TaskID: task.TaskID})
		}
		if task.Error != "" || attempt >= 20 {
			return nil, fmt.Errorf("request_task: no task: %s%s", task.Error, task.Info)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// loadGenerate posts bodies[i] from client i, as fast as each reply comes, for d; it returns
// the successful requests (200 with no "error" and, for beats, a live task), the seconds they
// took, and the failures.
func loadGenerate(ctx context.Context, url string, bodies [][]byte, d time.Duration) (ok int64, secs float64, failed int64) {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = len(bodies) + 4
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	var okN, failedN atomic.Int64
	lctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for _, body := range bodies {
		wg.Go(func() {
			for lctx.Err() == nil {
				req, _ := http.NewRequestWithContext(lctx, http.MethodPost, url, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					if lctx.Err() == nil {
						failedN.Add(1)
					}
					continue
				}
				var reply struct {
					Error     string `json:"error"`
					TaskAlive *bool  `json:"task_alive"`
				}
				err = json.NewDecoder(resp.Body).Decode(&reply)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || reply.Error != "" || (reply.TaskAlive != nil && !*reply.TaskAlive) {
					failedN.Add(1)
					continue
				}
				okN.Add(1)
			}
		})
	}
	wg.Wait()
	return okN.Load(), time.Since(start).Seconds(), failedN.Load()
}
