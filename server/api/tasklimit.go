package api

import (
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/server/guard"
)

// request_task is the one worker call that takes the scheduling lock, behind a semaphore of a
// few places: one account, or one address, asking in a loop could keep those places full for
// everyone. Each is limited to a rate sized from the protocol's cadence, far above what honest
// workers need: a worker asks once per task (half an hour of games) and, when told to wait,
// backs off for 15 s or more. An account may ask a task per machine it may run a minute, with
// a burst of two per machine (a whole fleet returning at once, twice); an address twenty a
// second with a burst of a thousand (a fleet behind one NAT). Both rates are for the default
// heartbeat period of 120 s and scale with it, as every other period of a server whose time is
// compressed (simulations, tests) does. The local proxy's address is not limited: every client
// comes through it, and its clients are limited by their own addresses.
const (
	taskRequestsPerMachineMinute = 1
	taskRequestBurstPerMachine   = 2
	taskRequestsPerAddress       = rate.Limit(20)
	taskRequestBurstPerAddress   = 1000
	taskLimitKeys                = 100_000
	taskLimitIdle                = 10 * time.Minute
	taskLimitedInfo              = "Request_task: too many requests for tasks from this account or address; retry later"
)

// taskLimiter holds a token bucket per account and per address. Safe for concurrent use.
type taskLimiter struct {
	speed     float64 // how much faster than real time the server runs (120 s / heartbeat)
	mu        sync.Mutex
	buckets   map[string]*taskBucket
	lastSweep time.Time
}

type taskBucket struct {
	lim  *rate.Limiter
	used time.Time
}

// newTaskLimiter returns the limits of a server whose workers beat every heartbeat (0: 120 s).
func newTaskLimiter(heartbeat time.Duration) *taskLimiter {
	speed := 1.0
	if heartbeat > 0 {
		speed = max(1, float64(2*time.Minute)/float64(heartbeat))
	}
	return &taskLimiter{speed: speed, buckets: map[string]*taskBucket{}}
}

// allow reports whether username, allowed machineLimit machines, may ask for a task from ip
// now; a refusal takes no token from the other bucket. An empty ip (taskLimitAddress's trusted
// proxy) is limited per user only.
func (l *taskLimiter) allow(username string, machineLimit int, ip string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastSweep) > taskLimitIdle || len(l.buckets) >= taskLimitKeys {
		for k, b := range l.buckets {
			if now.Sub(b.used) > taskLimitIdle || len(l.buckets) >= taskLimitKeys {
				delete(l.buckets, k)
			}
		}
		l.lastSweep = now
	}
	machines := max(machineLimit, 1)
	user := l.bucket("user\x00"+username, rate.Limit(float64(machines*taskRequestsPerMachineMinute)/60*l.speed),
		machines*taskRequestBurstPerMachine, now)
	var addr *taskBucket
	if ip != "" {
		addr = l.bucket("addr\x00"+guard.ClientKeyOf(ip), taskRequestsPerAddress*rate.Limit(l.speed), taskRequestBurstPerAddress, now)
	}
	ru := user.lim.ReserveN(now, 1)
	if !ru.OK() || ru.DelayFrom(now) > 0 {
		ru.CancelAt(now)
		return false
	}
	if addr != nil {
		ra := addr.lim.ReserveN(now, 1)
		if !ra.OK() || ra.DelayFrom(now) > 0 {
			ra.CancelAt(now)
			ru.CancelAt(now)
			return false
		}
	}
	return true
}

// bucket returns key's bucket with the given rate and burst (changed if a machine limit was).
// The caller holds l.mu.
func (l *taskLimiter) bucket(key string, r rate.Limit, burst int, now time.Time) *taskBucket {
	b := l.buckets[key]
	if b == nil {
		b = &taskBucket{lim: rate.NewLimiter(r, burst)}
		l.buckets[key] = b
	} else if b.lim.Limit() != r || b.lim.Burst() != burst {
		b.lim.SetLimitAt(now, r)
		b.lim.SetBurstAt(now, burst)
	}
	b.used = now
	return b
}

// taskLimitAddress is the address c's request_task counts against: the client's, or "" when the
// client is a trusted proxy itself (it speaks for many machines and limits them itself).
func taskLimitAddress(c *gin.Context) string {
	ip := guard.ClientIP(c)
	if guard.FromProxy(c) && ip == c.RemoteIP() {
		return ""
	}
	return ip
}
