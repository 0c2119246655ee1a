package rundb

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// RunVersion is the version of the run document shape Shoal writes (fishtest's RUN_VERSION).
const RunVersion = 24

// Extra holds the fields of a stored document that this version of Shoal does not model. They
// are read and written back untouched, so that replacing a run written by a newer fishtest or
// Shoal never drops data.
type Extra map[string]any

// Run is one test: its arguments, its aggregated results and every task handed out for it.
// Field names and types follow fishtest's runs collection.
//
// A Run held by the run cache (package runcache) is shared: read and change it only inside the
// callbacks of its View, Change and ChangeDurably.
type Run struct {
	ID              ObjectID  `bson:"_id" json:"_id"`
	Version         int       `bson:"version" json:"version"`
	StartTime       time.Time `bson:"start_time" json:"start_time"`
	LastUpdated     time.Time `bson:"last_updated" json:"last_updated"`
	TCBase          float64   `bson:"tc_base" json:"tc_base"`
	RescheduledFrom string    `bson:"rescheduled_from,omitempty" json:"rescheduled_from,omitempty"`

	Approved bool   `bson:"approved" json:"approved"`
	Approver string `bson:"approver" json:"approver"`

	Finished bool `bson:"finished" json:"finished"`
	Deleted  bool `bson:"deleted" json:"deleted"`
	Failed   bool `bson:"failed" json:"failed"`
	Failures int  `bson:"failures" json:"failures"`
	IsGreen  bool `bson:"is_green" json:"is_green"`
	IsYellow bool `bson:"is_yellow" json:"is_yellow"`

	Workers        int     `bson:"workers" json:"workers"`
	Cores          int     `bson:"cores" json:"cores"`
	CommittedGames int     `bson:"committed_games" json:"committed_games"`
	TotalGames     int     `bson:"total_games" json:"total_games"`
	Results        Results `bson:"results" json:"results"`

	NPS            float64 `bson:"nps" json:"nps"`
	GamesPerMinute float64 `bson:"games_per_minute" json:"games_per_minute"`

	Args     RunArgs `bson:"args" json:"args"`
	Tasks    []Task  `bson:"tasks" json:"tasks"`
	BadTasks []Task  `bson:"bad_tasks" json:"bad_tasks"`

	// BuildFailures are the reports of the workers that could not build the run's engines, the
	// latest of each worker (a field of Shoal's own, absent from fishtest's documents).
	BuildFailures []BuildFailure `bson:"build_failures,omitempty" json:"build_failures,omitempty"`

	// The journal position the document covers (see Journal); absent in documents written
	// without a journal, and never shown by the API.
	JournalEpoch int64 `bson:"journal_epoch,omitempty" json:"-"`
	JournalSeq   int64 `bson:"journal_seq,omitempty" json:"-"`

	Extra Extra `bson:",inline" json:"-"`
}

// BuildFailure is one worker's report that it could not build a run's engines: its failed task's
// message, which ends with the last lines of the build's log.
type BuildFailure struct {
	// Worker is the worker's short name (protocol.WorkerInfo.ShortName).
	Worker  string    `bson:"worker" json:"worker"`
	TaskID  int       `bson:"task_id" json:"task_id"`
	Time    time.Time `bson:"time" json:"time"`
	Message string    `bson:"message" json:"message"`
	// Counted: the report counts towards stopping the run, as its worker's user may stop runs
	// (the CPU hours stop_run asks for).
	Counted bool `bson:"counted" json:"counted"`
}

// Listed is a shallow copy of r as run listings show it: without its tasks, bad tasks and
// SPSA history (listingProjection's fields). r itself is left as it is.
func (r *Run) Listed() *Run {
	short := *r
	short.Tasks, short.BadTasks = nil, nil
	if r.Args.SPSA != nil {
		spsa := *r.Args.SPSA
		spsa.ParamHistory = nil
		short.Args.SPSA = &spsa
	}
	return &short
}

// Results are game counts: a run's totals or one task's cumulative report. Pentanomial counts
// game pairs by pair score (0, 1/2, 1, 3/2, 2 points); very old runs have none.
type Results struct {
	Wins        int   `bson:"wins" json:"wins"`
	Losses      int   `bson:"losses" json:"losses"`
	Draws       int   `bson:"draws" json:"draws"`
	Crashes     int   `bson:"crashes" json:"crashes"`
	TimeLosses  int   `bson:"time_losses" json:"time_losses"`
	Pentanomial []int `bson:"pentanomial,omitempty" json:"pentanomial,omitempty"`
}

// Games is the number of games the results count.
func (r Results) Games() int { return r.Wins + r.Losses + r.Draws }

// NewResults returns zero results with a zero pentanomial, the shape of a new task or run.
func NewResults() Results { return Results{Pentanomial: make([]int, 5)} }

// RunArgs are the arguments a test was submitted with (fishtest's run.args).
type RunArgs struct {
	BaseTag       string   `bson:"base_tag" json:"base_tag"`
	NewTag        string   `bson:"new_tag" json:"new_tag"`
	ResolvedBase  string   `bson:"resolved_base" json:"resolved_base"`
	ResolvedNew   string   `bson:"resolved_new" json:"resolved_new"`
	MsgBase       string   `bson:"msg_base" json:"msg_base"`
	MsgNew        string   `bson:"msg_new" json:"msg_new"`
	BaseNets      []string `bson:"base_nets" json:"base_nets"`
	NewNets       []string `bson:"new_nets" json:"new_nets"`
	NumGames      int      `bson:"num_games" json:"num_games"`
	TC            string   `bson:"tc" json:"tc"`
	NewTC         string   `bson:"new_tc" json:"new_tc"`
	Threads       int      `bson:"threads" json:"threads"`
	Book          string   `bson:"book" json:"book"`
	BookDepth     string   `bson:"book_depth" json:"book_depth"`
	BaseOptions   string   `bson:"base_options" json:"base_options"`
	NewOptions    string   `bson:"new_options" json:"new_options"`
	Info          string   `bson:"info" json:"info"`
	Username      string   `bson:"username" json:"username"`
	BaseSignature string   `bson:"base_signature" json:"base_signature"`
	NewSignature  string   `bson:"new_signature" json:"new_signature"`
	TestsRepo     string   `bson:"tests_repo" json:"tests_repo"`
	MasterRepo    string   `bson:"master_repo,omitempty" json:"master_repo,omitempty"`
	Throughput    float64  `bson:"throughput" json:"throughput"`
	ITP           float64  `bson:"itp" json:"itp"`
	Priority      float64  `bson:"priority" json:"priority"`
	AutoPurge     bool     `bson:"auto_purge" json:"auto_purge"`
	Adjudication  bool     `bson:"adjudication" json:"adjudication"`
	ArchFilter    string   `bson:"arch_filter,omitempty" json:"arch_filter,omitempty"`
	Compiler      string   `bson:"compiler,omitempty" json:"compiler,omitempty"`
	SPRT          *SPRT    `bson:"sprt,omitempty" json:"sprt,omitempty"`
	SPSA          *SPSA    `bson:"spsa,omitempty" json:"spsa,omitempty"`

	Extra Extra `bson:",inline" json:"-"`
}

// SPRT is the state of a sequential test: its parameters, the current LLR and decision, and the
// dynamic overshoot correction. Exactly one of Overshoot and LostSamples is set.
type SPRT struct {
	Alpha         float64    `bson:"alpha" json:"alpha"`
	Beta          float64    `bson:"beta" json:"beta"`
	Elo0          float64    `bson:"elo0" json:"elo0"`
	Elo1          float64    `bson:"elo1" json:"elo1"`
	EloModel      string     `bson:"elo_model" json:"elo_model"`
	State         string     `bson:"state" json:"state"`
	LLR           float64    `bson:"llr" json:"llr"`
	BatchSize     int        `bson:"batch_size" json:"batch_size"`
	LowerBound    float64    `bson:"lower_bound" json:"lower_bound"`
	UpperBound    float64    `bson:"upper_bound" json:"upper_bound"`
	Overshoot     *Overshoot `bson:"overshoot,omitempty" json:"overshoot,omitempty"`
	LostSamples   *int       `bson:"lost_samples,omitempty" json:"lost_samples,omitempty"`
	IllegalUpdate *int       `bson:"illegal_update,omitempty" json:"illegal_update,omitempty"`

	Extra Extra `bson:",inline" json:"-"`
}

// Overshoot is the running state of the dynamic overshoot correction of the SPRT bounds.
type Overshoot struct {
	LastUpdate     int     `bson:"last_update" json:"last_update"`
	SkippedUpdates int     `bson:"skipped_updates" json:"skipped_updates"`
	Ref0           float64 `bson:"ref0" json:"ref0"`
	M0             float64 `bson:"m0" json:"m0"`
	Sq0            float64 `bson:"sq0" json:"sq0"`
	Ref1           float64 `bson:"ref1" json:"ref1"`
	M1             float64 `bson:"m1" json:"m1"`
	Sq1            float64 `bson:"sq1" json:"sq1"`
}

// SPSA is the state of a tuning run (classic SPSA).
type SPSA struct {
	Algorithm    string       `bson:"algorithm,omitempty" json:"algorithm,omitempty"`
	A            float64      `bson:"A" json:"A"`
	Alpha        float64      `bson:"alpha" json:"alpha"`
	Gamma        float64      `bson:"gamma" json:"gamma"`
	RawParams    string       `bson:"raw_params" json:"raw_params"`
	Iter         int          `bson:"iter" json:"iter"`
	NumIter      int          `bson:"num_iter" json:"num_iter"`
	Params       []SPSAParam  `bson:"params" json:"params"`
	ParamHistory ParamHistory `bson:"param_history,omitempty" json:"param_history,omitempty"`

	Extra Extra `bson:",inline" json:"-"`
}

// SPSAParam is one tuned parameter.
type SPSAParam struct {
	Name  string  `bson:"name" json:"name"`
	Start float64 `bson:"start" json:"start"`
	Min   float64 `bson:"min" json:"min"`
	Max   float64 `bson:"max" json:"max"`
	CEnd  float64 `bson:"c_end" json:"c_end"`
	REnd  float64 `bson:"r_end" json:"r_end"`
	C     float64 `bson:"c" json:"c"`
	AEnd  float64 `bson:"a_end" json:"a_end"`
	A     float64 `bson:"a" json:"a"`
	Theta float64 `bson:"theta" json:"theta"`
}

// ParamHistory is the sampled history of every parameter: one row per sample, one point per
// parameter. fishtest stores it as an array of arrays; on FerretDB, which has no nested arrays,
// Shoal stores each row as a {"row": [...]} document instead. Both forms read back the same.
type ParamHistory [][]SPSAHistoryPoint

// flatHistoryRow is one sample of param_history in the FerretDB form.
type flatHistoryRow struct {
	Row []SPSAHistoryPoint `bson:"row"`
}

// UnmarshalBSONValue reads param_history in either form.
func (h *ParamHistory) UnmarshalBSONValue(typ byte, data []byte) error {
	if bson.Type(typ) == bson.TypeNull {
		*h = nil
		return nil
	}
	if bson.Type(typ) != bson.TypeArray {
		return fmt.Errorf("param_history is BSON type %v, want an array", bson.Type(typ))
	}
	values, err := bson.RawArray(data).Values()
	if err != nil {
		return fmt.Errorf("param_history: %w", err)
	}
	out := make(ParamHistory, len(values))
	for i, v := range values {
		switch v.Type {
		case bson.TypeArray:
			err = v.Unmarshal(&out[i])
		case bson.TypeEmbeddedDocument:
			var row flatHistoryRow
			err = v.Unmarshal(&row)
			out[i] = row.Row
		default:
			err = fmt.Errorf("element is BSON type %v", v.Type)
		}
		if err != nil {
			return fmt.Errorf("param_history[%d]: %w", i, err)
		}
	}
	*h = out
	return nil
}

// ferretRegistry encodes runs for FerretDB: ParamHistory without nested arrays, and the
// infinities FerretDB refuses (a purged task's residual can be +Inf) as ±MaxFloat64, which it
// decodes back into infinities.
var ferretRegistry = func() *bson.Registry {
	reg := bson.NewRegistry()
	floatType := reflect.TypeOf(float64(0))
	floatEnc, _ := reg.LookupEncoder(floatType)
	floatDec, _ := reg.LookupDecoder(floatType)
	reg.RegisterTypeEncoder(floatType, bson.ValueEncoderFunc(
		func(ec bson.EncodeContext, vw bson.ValueWriter, v reflect.Value) error {
			if f := v.Float(); math.IsInf(f, 0) {
				v = reflect.ValueOf(math.Copysign(math.MaxFloat64, f))
			}
			return floatEnc.EncodeValue(ec, vw, v)
		}))
	reg.RegisterTypeDecoder(floatType, bson.ValueDecoderFunc(
		func(dc bson.DecodeContext, vr bson.ValueReader, v reflect.Value) error {
			if err := floatDec.DecodeValue(dc, vr, v); err != nil {
				return err
			}
			if f := v.Float(); math.Abs(f) == math.MaxFloat64 {
				v.SetFloat(math.Inf(int(math.Copysign(1, f))))
			}
			return nil
		}))
	reg.RegisterTypeEncoder(reflect.TypeOf(ParamHistory(nil)), bson.ValueEncoderFunc(
		func(ec bson.EncodeContext, vw bson.ValueWriter, v reflect.Value) error {
			h := v.Interface().(ParamHistory)
			rows := make([]flatHistoryRow, len(h))
			for i, row := range h {
				rows[i] = flatHistoryRow{Row: row}
			}
			enc, err := ec.LookupEncoder(reflect.TypeOf(rows))
			if err != nil {
				return err
			}
			return enc.EncodeValue(ec, vw, reflect.ValueOf(rows))
		}))
	return reg
}()

// SPSAHistoryPoint is one parameter's value at one sampled iteration.
type SPSAHistoryPoint struct {
	Theta float64 `bson:"theta" json:"theta"`
	R     float64 `bson:"R" json:"R"`
	C     float64 `bson:"c" json:"c"`
}

// Task is a batch of games assigned to one worker. Tasks are appended and never reused, so a
// task's index in Run.Tasks is its id for the life of the run. The same type holds the copies
// kept in Run.BadTasks after a purge, which add TaskID and the residual.
type Task struct {
	NumGames    int         `bson:"num_games" json:"num_games"`
	Active      bool        `bson:"active" json:"active"`
	LastUpdated time.Time   `bson:"last_updated" json:"last_updated"`
	Start       int         `bson:"start" json:"start"`
	Stats       Results     `bson:"stats" json:"stats"`
	WorkerInfo  WorkerInfo  `bson:"worker_info" json:"worker_info"`
	Bad         bool        `bson:"bad,omitempty" json:"bad,omitempty"`
	SPSAParams  *SPSAParams `bson:"spsa_params,omitempty" json:"spsa_params,omitempty"`

	// Only in bad_tasks.
	TaskID        *int     `bson:"task_id,omitempty" json:"task_id,omitempty"`
	Residual      *float64 `bson:"residual,omitempty" json:"residual,omitempty"`
	ResidualColor string   `bson:"residual_color,omitempty" json:"residual_color,omitempty"`

	Extra Extra `bson:",inline" json:"-"`
}

// SPSAParams records the flips handed to a task for its current SPSA batch, so that the result
// can be applied with the same perturbation; PackedFlips has one bit per parameter, 1 for +1.
type SPSAParams struct {
	Iter        int    `bson:"iter" json:"iter"`
	PackedFlips []byte `bson:"packed_flips" json:"packed_flips"`
}

// WorkerInfo describes a worker machine as it reported itself, plus the two fields the server
// adds (RemoteAddr and CountryCode).
type WorkerInfo struct {
	Uname              string   `bson:"uname" json:"uname"`
	Architecture       []string `bson:"architecture" json:"architecture"`
	Concurrency        int      `bson:"concurrency" json:"concurrency"`
	MaxMemory          int      `bson:"max_memory" json:"max_memory"`
	MinThreads         int      `bson:"min_threads" json:"min_threads"`
	Username           string   `bson:"username" json:"username"`
	Version            int      `bson:"version" json:"version"`
	PythonVersion      []int    `bson:"python_version" json:"python_version"`
	GCCVersion         []int    `bson:"gcc_version" json:"gcc_version"`
	Compiler           string   `bson:"compiler" json:"compiler"`
	UniqueKey          string   `bson:"unique_key" json:"unique_key"`
	Modified           bool     `bson:"modified" json:"modified"`
	WorkerArch         string   `bson:"worker_arch" json:"worker_arch"`
	ARCH               string   `bson:"ARCH" json:"ARCH"`
	NPS                float64  `bson:"nps" json:"nps"`
	NearGithubAPILimit bool     `bson:"near_github_api_limit" json:"near_github_api_limit"`
	RemoteAddr         string   `bson:"remote_addr" json:"remote_addr"`
	CountryCode        string   `bson:"country_code" json:"country_code"`

	Extra Extra `bson:",inline" json:"-"`
}

// ShortName is the worker's name for duplicate detection and blocking:
// "{username}-{concurrency}cores-{first segment of unique_key}".
func (w WorkerInfo) ShortName() string {
	name := w.Username + "-" + strconv.Itoa(w.Concurrency) + "cores"
	if w.UniqueKey != "" {
		name += "-" + strings.SplitN(w.UniqueKey, "-", 2)[0]
	}
	return name
}

// LongName is ShortName with the second segment of unique_key, and a star for a modified
// worker: the name tasks and the event log show.
func (w WorkerInfo) LongName() string {
	name := w.ShortName()
	if parts := strings.Split(w.UniqueKey, "-"); w.UniqueKey != "" && len(parts) >= 2 {
		name += "-" + parts[1]
	}
	if w.Modified {
		name += "*"
	}
	return name
}

// RunStore reads and writes the runs collection directly. On the primary, active runs go
// through the run cache (package runcache) instead, which writes behind to this store. Safe for concurrent use.
type RunStore struct {
	coll *mongo.Collection
	// flatHistory encodes runs for FerretDB (the embedded database), which lacks nested arrays
	// and infinities; see ferretRegistry. Runs read back the same either way.
	flatHistory bool
	// scanDuty, on FerretDB, paces EachFinished: the share of the time its scan keeps the
	// database busy (0: no pacing, one query). See EachFinished.
	scanDuty float64
}

// Codec encodes runs, and documents holding parts of runs (the journal's records), in the form
// one kind of server accepts, and decodes them. The run cache and the journal use it to encode
// under a run's lock and write afterwards. Safe for concurrent use.
type Codec struct {
	// flat encodes for FerretDB (the embedded database), which lacks nested arrays and
	// infinities; see ferretRegistry. Documents read back the same either way.
	flat bool
}

// NewCodec returns the codec of FerretDB (ferret) or of MongoDB. A store's own is RunStore.Codec.
func NewCodec(ferret bool) Codec { return Codec{flat: ferret} }

// Codec is the codec of this store's server.
func (s *RunStore) Codec() Codec { return Codec{flat: s.flatHistory} }

// encode turns a run into the document this store's server accepts.
func (s *RunStore) encode(r *Run) ([]byte, error) { return s.Codec().Encode(r) }

// Encode encodes v, a run or a document holding parts of one (a journal record).
func (c Codec) Encode(v any) ([]byte, error) {
	if !c.flat {
		return bson.Marshal(v)
	}
	return c.NewEncoder().Encode(v) // a fresh encoder's bytes are the caller's
}

// decode reads a run document written by encode or by fishtest.
func (s *RunStore) decode(raw bson.Raw) (*Run, error) {
	var r Run
	if err := s.Codec().Decode(raw, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Decode reads a document written by Encode (or, for a run, by fishtest) into v.
func (c Codec) Decode(raw []byte, v any) error {
	if !c.flat {
		return bson.Unmarshal(raw, v)
	}
	dec := bson.NewDecoder(bson.NewDocumentReader(bytes.NewReader(raw)))
	dec.SetRegistry(ferretRegistry)
	return dec.Decode(v)
}

// Insert stores a new run, giving it an ID if it has none.
func (s *RunStore) Insert(ctx context.Context, r *Run) error {
	if r.ID.IsZero() {
		r.ID = NewObjectID()
	}
	doc, err := s.encode(r)
	if err != nil {
		return fmt.Errorf("encode run %s: %w", r.ID, err)
	}
	if _, err := s.coll.InsertOne(ctx, bson.Raw(doc)); err != nil {
		return fmt.Errorf("insert run %s: %w", r.ID, mapError(err))
	}
	return nil
}

// Get reads one run from the database, bypassing any cache.
func (s *RunStore) Get(ctx context.Context, id ObjectID) (*Run, error) {
	raw, err := s.coll.FindOne(ctx, idFilter(id)).Raw()
	if err != nil {
		return nil, fmt.Errorf("get run %s: %w", id, mapError(err))
	}
	r, err := s.decode(raw)
	if err != nil {
		return nil, fmt.Errorf("decode run %s: %w", id, err)
	}
	return r, nil
}

// Replace writes the whole run document, as fishtest does; ErrNotFound if it does not exist.
func (s *RunStore) Replace(ctx context.Context, r *Run) error {
	doc, err := s.encode(r)
	if err != nil {
		return fmt.Errorf("encode run %s: %w", r.ID, err)
	}
	return s.replaceRaw(ctx, r.ID, doc, false)
}

// ReplaceEncoded writes a whole run document encoded by this store's Codec, creating it if it
// is missing: for the run cache, which encodes a run under its lock and writes it afterwards.
func (s *RunStore) ReplaceEncoded(ctx context.Context, id ObjectID, doc []byte) error {
	return s.replaceRaw(ctx, id, doc, true)
}

// replaceRaw writes an already encoded run document; upsert creates it if missing.
//
// It is the update command ReplaceOne sends (one statement, ordered, the collection's write
// concern, retried as ReplaceOne is), sent as a bulk write of one replacement: ReplaceOne
// re-encodes its replacement, a raw document too, into a copy of its own before it builds the
// command, while a bulk write's replacement goes into the command as it is.
func (s *RunStore) replaceRaw(ctx context.Context, id ObjectID, doc []byte, upsert bool) error {
	replace := mongo.NewReplaceOneModel().SetFilter(idFilter(id)).SetReplacement(bson.Raw(doc)).SetUpsert(upsert)
	res, err := s.coll.BulkWrite(ctx, []mongo.WriteModel{replace})
	if err != nil {
		return fmt.Errorf("replace run %s: %w", id, mapError(err))
	}
	if !upsert && res.MatchedCount == 0 {
		return fmt.Errorf("replace run %s: %w", id, ErrNotFound)
	}
	return nil
}

// Unfinished returns every run that is not finished, oldest first. The scheduler rebuilds its
// state from them at start-up.
func (s *RunStore) Unfinished(ctx context.Context) ([]*Run, error) {
	filter := bson.D{{Key: "finished", Value: false}}
	opts := options.Find().SetSort(bson.D{{Key: "_id", Value: 1}})
	runs, err := s.findWithHint(ctx, filter, opts, "unfinished_runs")
	if err != nil {
		return nil, fmt.Errorf("list unfinished runs: %w", err)
	}
	return runs, nil
}

// findAllWithHint runs a query with an index hint by name and falls back to no hint if the
// server rejects it (the index may be missing, or the server may not support hints), as fishtest
// does.
func (s *RunStore) findWithHint(ctx context.Context, filter bson.D, opts *options.FindOptionsBuilder, hint string) ([]*Run, error) {
	var out []*Run
	err := s.eachWithHint(ctx, filter, opts, hint, func(r *Run) error {
		out = append(out, r)
		return nil
	})
	return out, err
}

// eachWithHint is findWithHint calling fn with each run as it is decoded, stopping at fn's
// first error, so that a long scan does not hold every run in memory.
func (s *RunStore) eachWithHint(ctx context.Context, filter bson.D, opts *options.FindOptionsBuilder, hint string, fn func(*Run) error) error {
	cur, err := s.coll.Find(ctx, filter, opts.SetHint(hint))
	if err != nil {
		cur, err = s.coll.Find(ctx, filter, opts.SetHint(nil))
		if err != nil {
			return err
		}
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		r, err := s.decode(cur.Current)
		if err != nil {
			return err
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return cur.Err()
}
