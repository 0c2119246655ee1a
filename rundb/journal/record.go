package journal

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/shoal-chess/shoal/rundb"
)

// journalEntry is a record queued for the writer. Entries are reused (entries), with the
// buffer their record is encoded in: update_task queues thousands a second. The writer
// gives an entry back once the record is written and its caller told; done is made afresh
// for every record, since a caller that stopped waiting may never read it.
type journalEntry struct {
	run    rundb.ObjectID
	pos    Position
	doc    []byte
	done   chan error
	queued time.Time
}

// entries holds the journal entries the writer gave back.
var entries = sync.Pool{New: func() any { return &journalEntry{doc: make([]byte, 0, 512)} }}

// maxKeptDoc bounds the record buffer an entry keeps for its next use; a record that needed
// more (a whole task with a long worker_info, an SPSA state) leaves its buffer to the collector.
const maxKeptDoc = 4096

// recycle gives back an entry whose record is written and whose caller was told.
func recycle(e *journalEntry) {
	if cap(e.doc) > maxKeptDoc {
		return
	}
	*e = journalEntry{doc: e.doc[:0]}
	entries.Put(e)
}

type journalRecord struct {
	Run         rundb.ObjectID `bson:"run"`
	Epoch       int64          `bson:"epoch"`
	Seq         int64          `bson:"seq"`
	Tasks       []journalTask  `bson:"tasks"`
	SPSA        *journalSPSA   `bson:"spsa,omitempty"`
	LastUpdated time.Time      `bson:"last_updated"`
}

func (r *journalRecord) pos() Position { return Position{r.Epoch, r.Seq} }

// storedRecord is a record as the journal collection holds it: the record itself encoded as one
// binary value. The embedded database stores a binary value as it is, where it would convert
// every field of a nested document (a task's worker_info above all): a batch of 32 records is
// written in a third of the time (3.1 against 9.9 ms, measured on the embedded database).
type storedRecord struct {
	Run    rundb.ObjectID `bson:"run"`
	Epoch  int64          `bson:"epoch"`
	Seq    int64          `bson:"seq"`
	Record []byte         `bson:"record"`
}

// encodeRecord is rec as the journal stores it.
func (j *Journal) encodeRecord(rec *journalRecord) ([]byte, error) {
	if plainShaped(rec) { // checked first, so that no buffer is made for another shape
		size := 512 // a record of cores fits, and each whole task adds about 500 bytes
		for _, t := range rec.Tasks {
			if t.Task != nil {
				size += 512
			}
		}
		return appendShaped(make([]byte, 0, size), rec), nil
	}
	return j.reflectRecord(rec)
}

// reflectRecord is encodeRecord for every shape of record, by the driver's encoder.
func (j *Journal) reflectRecord(rec *journalRecord) ([]byte, error) {
	inner, err := j.codec.Encode(rec)
	if err != nil {
		return nil, err
	}
	return appendStoredRecord(make([]byte, 0, len(inner)+64), rec, inner), nil
}

// appendStoredRecord appends storedRecord's bytes for rec, encoded as inner: what bson.Marshal
// writes for it (a test compares them), without the copy and reflection.
func appendStoredRecord(dst []byte, rec *journalRecord, inner []byte) []byte {
	outer, dst := bsoncore.AppendDocumentStart(dst)
	dst = appendPosition(dst, rec)
	if inner == nil { // as the driver writes a nil slice (an encoded record never is one)
		dst = bsoncore.AppendNullElement(dst, "record")
	} else {
		dst = bsoncore.AppendBinaryElement(dst, "record", 0x00, inner)
	}
	dst, _ = bsoncore.AppendDocumentEnd(dst, outer)
	return dst
}

// journalTask is one task of a record: its whole after-image (Task), or for a change to an
// existing task that kept its worker, only the fields such a change touches (Core): the
// worker_info is most of a task's bytes and of the time its encoding takes. Records written
// before Core existed hold Task, which decodes as before.
type journalTask struct {
	Index int         `bson:"i"`
	Task  *rundb.Task `bson:"task,omitempty"`
	Core  *taskCore   `bson:"core,omitempty"`
}

// taskCore is a task without its worker_info and the fields Shoal does not know (Extra).
type taskCore struct {
	NumGames      int               `bson:"num_games"`
	Active        bool              `bson:"active"`
	LastUpdated   time.Time         `bson:"last_updated"`
	Start         int               `bson:"start"`
	Stats         rundb.Results     `bson:"stats"`
	Bad           bool              `bson:"bad,omitempty"`
	SPSAParams    *rundb.SPSAParams `bson:"spsa_params,omitempty"`
	TaskID        *int              `bson:"task_id,omitempty"`
	Residual      *float64          `bson:"residual,omitempty"`
	ResidualColor string            `bson:"residual_color,omitempty"`
}

func coreOf(t *rundb.Task) *taskCore {
	c := coreValue(t)
	return &c
}

func coreValue(t *rundb.Task) taskCore {
	return taskCore{NumGames: t.NumGames, Active: t.Active, LastUpdated: t.LastUpdated, Start: t.Start,
		Stats: t.Stats, Bad: t.Bad, SPSAParams: t.SPSAParams, TaskID: t.TaskID, Residual: t.Residual,
		ResidualColor: t.ResidualColor}
}

// applyTo sets t's fields from c, keeping t's worker_info and unknown fields.
func (c *taskCore) applyTo(t *rundb.Task) {
	t.NumGames, t.Active, t.LastUpdated, t.Start, t.Stats = c.NumGames, c.Active, c.LastUpdated, c.Start, c.Stats
	t.Bad, t.SPSAParams, t.TaskID, t.Residual, t.ResidualColor = c.Bad, c.SPSAParams, c.TaskID, c.Residual, c.ResidualColor
}

// sameWorker says whether a and b have equal worker_info and no unknown fields: then a change
// from a to b is written as b's core alone.
func sameWorker(a, b *rundb.Task) bool {
	return len(a.Extra) == 0 && len(b.Extra) == 0 && len(a.WorkerInfo.Extra) == 0 && len(b.WorkerInfo.Extra) == 0 &&
		equalWorkerInfo(&a.WorkerInfo, &b.WorkerInfo)
}

func equalWorkerInfo(a, b *rundb.WorkerInfo) bool {
	return a.Uname == b.Uname && slices.Equal(a.Architecture, b.Architecture) && a.Concurrency == b.Concurrency &&
		a.MaxMemory == b.MaxMemory && a.MinThreads == b.MinThreads && a.Username == b.Username &&
		a.Version == b.Version && slices.Equal(a.PythonVersion, b.PythonVersion) &&
		slices.Equal(a.GCCVersion, b.GCCVersion) && a.Compiler == b.Compiler && a.UniqueKey == b.UniqueKey &&
		a.Modified == b.Modified && a.WorkerArch == b.WorkerArch && a.ARCH == b.ARCH && a.NPS == b.NPS &&
		a.NearGithubAPILimit == b.NearGithubAPILimit && a.RemoteAddr == b.RemoteAddr && a.CountryCode == b.CountryCode
}

type journalSPSA struct {
	Iter        int                `bson:"iter"`
	Theta       []float64          `bson:"theta"`
	HistoryFrom int                `bson:"history_from"`
	History     rundb.ParamHistory `bson:"history,omitempty"`
}

// Mark is what Record needs of a run from before a change: where its tasks and history ended,
// and a copy of the task the change is about, if it existed (before is nil otherwise). Its
// fields are the journal's own: the run cache takes a Mark before a change and hands it back.
type Mark struct {
	tasks, history int
	before         *rundb.Task
}

// MarkOf is r's Mark before a change about task (-1: no task in particular). r's lock is held.
func MarkOf(r *rundb.Run, task int) Mark {
	m := Mark{tasks: len(r.Tasks)}
	if task >= 0 && task < len(r.Tasks) {
		before := r.Tasks[task]
		m.before = &before
	}
	if r.Args.SPSA != nil {
		m.history = len(r.Args.SPSA.ParamHistory)
	}
	return m
}

// Record makes r's next journal record after a change, and queues it: the task the change is
// about (if it existed before, as m says), the tasks appended since m, and the SPSA state with
// the history rows added since m. The caller holds r's lock, so records of one run are queued in
// their order. Its channel receives the write's outcome.
func (j *Journal) Record(r *rundb.Run, task int, m Mark) (<-chan error, error) {
	e := entries.Get().(*journalEntry)
	doc, pos, ok := j.appendCoreChange(e.doc[:0], r, task, m)
	if !ok {
		doc, pos, ok = j.appendNewTaskChange(e.doc[:0], r, task, m)
	}
	if !ok {
		entries.Put(e)
		return j.push(r, j.makeRecord(r, task, m))
	}
	e.doc = doc
	r.JournalEpoch, r.JournalSeq = pos.Epoch, pos.Seq
	return j.enqueue(r.ID, pos, e), nil
}

// appendCoreChange is Record's way for update_task's usual record, the core of one existing
// task that kept its worker (see appendCoreRecord): it appends to dst the bytes makeRecord and
// encodeRecord would give, without the record's allocations, and returns its position. It
// returns false for any other record.
func (j *Journal) appendCoreChange(dst []byte, r *rundb.Run, task int, m Mark) ([]byte, Position, bool) {
	if m.before == nil || task >= len(r.Tasks) || m.tasks < len(r.Tasks) || r.Args.SPSA != nil ||
		!sameWorker(m.before, &r.Tasks[task]) {
		return dst, Position{}, false
	}
	core := coreValue(&r.Tasks[task])
	tasks := [1]journalTask{{Index: task, Core: &core}}
	rec := j.nextRecord(r, tasks[:])
	doc, ok := appendCoreRecord(dst, &rec)
	return doc, rec.pos(), ok
}

// maxStackThetas is the number of SPSA parameters whose thetas appendNewTaskChange gathers
// without an allocation; a run with more has them in a slice of its own.
const maxStackThetas = 32

// appendNewTaskChange is Record's way for request_task's record: one task appended, whole, and
// for an SPSA run its state (see appendShaped). It appends to dst the bytes makeRecord and
// encodeRecord would give, without the record's allocations, and returns its position. It
// returns false for any other record.
func (j *Journal) appendNewTaskChange(dst []byte, r *rundb.Run, task int, m Mark) ([]byte, Position, bool) {
	if (m.before != nil && task < len(r.Tasks)) || len(r.Tasks) != m.tasks+1 {
		return dst, Position{}, false
	}
	tasks := [1]journalTask{{Index: m.tasks, Task: &r.Tasks[m.tasks]}}
	rec := j.nextRecord(r, tasks[:])
	var spsa journalSPSA
	var thetas [maxStackThetas]float64
	if s := r.Args.SPSA; s != nil {
		spsa = spsaState(s, m.history, thetas[:0])
		rec.SPSA = &spsa
	}
	if !plainShaped(&rec) {
		return dst, Position{}, false
	}
	return appendShaped(dst, &rec), rec.pos(), true
}

// makeRecord is r's next record after a change about task, m being MarkOf(r, task) from before
// it (see Record).
func (j *Journal) makeRecord(r *rundb.Run, task int, m Mark) *journalRecord {
	var tasks []int
	existed := m.before != nil && task < len(r.Tasks) // then tasks[0] is task
	if existed {
		tasks = append(tasks, task)
	}
	for i := m.tasks; i < len(r.Tasks); i++ {
		tasks = append(tasks, i)
	}
	rec := j.newRecord(r, tasks, m.history)
	if existed && sameWorker(m.before, &r.Tasks[task]) {
		rec.Tasks[0] = journalTask{Index: task, Core: coreOf(&r.Tasks[task])}
	}
	return rec
}

// queueRecord queues r's next record: the after-images of tasks (indices into r.Tasks), and for
// an SPSA run its iteration, thetas and the history rows from historyFrom on. It advances r's
// position to the record's.
func (j *Journal) queueRecord(r *rundb.Run, tasks []int, historyFrom int) (<-chan error, error) {
	return j.push(r, j.newRecord(r, tasks, historyFrom))
}

// newRecord is r's next record with the whole after-images of tasks (see queueRecord).
func (j *Journal) newRecord(r *rundb.Run, tasks []int, historyFrom int) *journalRecord {
	rec := j.nextRecord(r, nil)
	for _, i := range tasks {
		rec.Tasks = append(rec.Tasks, journalTask{Index: i, Task: &r.Tasks[i]})
	}
	if s := r.Args.SPSA; s != nil {
		js := spsaState(s, historyFrom, make([]float64, 0, len(s.Params)))
		rec.SPSA = &js
	}
	return &rec
}

// nextRecord is r's next record, with tasks and without SPSA state.
func (j *Journal) nextRecord(r *rundb.Run, tasks []journalTask) journalRecord {
	return journalRecord{Run: r.ID, Epoch: j.epoch, Seq: r.JournalSeq + 1, Tasks: tasks, LastUpdated: r.LastUpdated}
}

// spsaState is an SPSA run's state for a record: its iteration, its thetas appended to thetas
// (never nil: pass an empty slice), and its history rows from historyFrom on.
func spsaState(s *rundb.SPSA, historyFrom int, thetas []float64) journalSPSA {
	from := min(historyFrom, len(s.ParamHistory))
	for _, p := range s.Params {
		thetas = append(thetas, p.Theta)
	}
	return journalSPSA{Iter: s.Iter, Theta: thetas, HistoryFrom: from, History: s.ParamHistory[from:]}
}

// push encodes rec, queues it and advances r's position to it. r's lock is held.
func (j *Journal) push(r *rundb.Run, rec *journalRecord) (<-chan error, error) {
	doc, err := j.encodeRecord(rec)
	if err != nil {
		return nil, fmt.Errorf("%w: journal: encode a record of run %s: %w", rundb.ErrNotStored, r.ID, err)
	}
	r.JournalEpoch, r.JournalSeq = rec.Epoch, rec.Seq
	return j.enqueue(r.ID, rec.pos(), &journalEntry{doc: doc}), nil
}

// decodeStored decodes one stored record: its envelope, and the record the envelope carries.
func (j *Journal) decodeStored(raw []byte) (storedRecord, *journalRecord, error) {
	var stored storedRecord
	rec := new(journalRecord)
	err := bson.Unmarshal(raw, &stored)
	if err == nil {
		err = j.codec.Decode(stored.Record, rec)
	}
	return stored, rec, err
}

// applyRecord writes a record's after-images into r.
func applyRecord(r *rundb.Run, rec *journalRecord) error {
	for _, t := range rec.Tasks {
		switch {
		case t.Core != nil && t.Index < len(r.Tasks):
			t.Core.applyTo(&r.Tasks[t.Index])
		case t.Core != nil:
			return fmt.Errorf("a change to task %d, after only %d tasks", t.Index, len(r.Tasks))
		case t.Task == nil:
			return fmt.Errorf("task %d without its contents", t.Index)
		case t.Index < len(r.Tasks):
			r.Tasks[t.Index] = *t.Task
		case t.Index == len(r.Tasks):
			r.Tasks = append(r.Tasks, *t.Task)
		default:
			return fmt.Errorf("task %d after only %d tasks", t.Index, len(r.Tasks))
		}
	}
	if s, js := r.Args.SPSA, rec.SPSA; s != nil && js != nil {
		if len(js.Theta) != len(s.Params) {
			return fmt.Errorf("%d thetas for %d parameters", len(js.Theta), len(s.Params))
		}
		s.Iter = js.Iter
		for i := range s.Params {
			s.Params[i].Theta = js.Theta[i]
		}
		if js.HistoryFrom <= len(s.ParamHistory) {
			s.ParamHistory = append(s.ParamHistory[:js.HistoryFrom], js.History...)
		}
	}
	if rec.LastUpdated.After(r.LastUpdated) {
		r.LastUpdated = rec.LastUpdated
	}
	r.JournalEpoch, r.JournalSeq = rec.Epoch, rec.Seq
	return nil
}
