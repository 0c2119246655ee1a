package rundb

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// batcher gathers the documents many goroutines store one at a time and writes those that
// arrived together with one command. At a run's end or a fleet's restart thousands of workers
// end their tasks together, and each upload or log line stored as an insert of its own is a
// command and, on the embedded database, a transaction of its own, queued behind the
// database's other work. The writer goroutine takes whatever is waiting when it is free, so
// batches grow with the load and a lone document waits for nothing. Safe for concurrent use.
type batcher[T any] struct {
	// write stores one batch and returns each document's error. Its context ends with the
	// batcher (stop); write bounds each of its commands with batchWriteTimeout.
	write func(ctx context.Context, batch []T) []error
	queue chan *batchItem[T]
	life  context.Context    // the writer's: ended by stop
	end   context.CancelFunc // ends life
	done  chan struct{}      // closed when the writer has returned
}

// batchItem is one document waiting for the writer, and where its outcome goes.
type batchItem[T any] struct {
	doc  T
	done chan error // buffered: the writer never waits for a caller that gave up
}

// maxInsertBatch bounds the documents one command carries.
const maxInsertBatch = 256

// batchWriteTimeout bounds each command of a batch's write: its callers may have given up; the
// writer goes on with the next batch.
const batchWriteTimeout = 30 * time.Second

// errWriterStopped is a put after the database was closed.
var errWriterStopped = errors.New("the database is closed")

// newBatcher starts the writer goroutine, which stop ends.
func newBatcher[T any](write func(ctx context.Context, batch []T) []error) *batcher[T] {
	b := &batcher[T]{write: write, queue: make(chan *batchItem[T], maxInsertBatch), done: make(chan struct{})}
	b.life, b.end = context.WithCancel(context.Background())
	go b.run() // joined by stop
	return b
}

// stop ends the writer, cutting short the batch it is writing (those puts fail; the server has
// drained its requests before it closes the database), and answers what was queued with an
// error; puts from then on fail.
func (b *batcher[T]) stop() {
	b.end()
	<-b.done
}

func (b *batcher[T]) run() {
	defer close(b.done)
	defer func() { // what was queued as the writer stopped is answered, not left in the buffer
		for {
			select {
			case it := <-b.queue:
				it.done <- errWriterStopped
			default:
				return
			}
		}
	}()
	items := make([]*batchItem[T], 0, maxInsertBatch)
	docs := make([]T, 0, maxInsertBatch)
	for {
		select {
		case <-b.life.Done():
			return
		case it := <-b.queue:
			items = append(items[:0], it)
		}
	gather:
		for len(items) < maxInsertBatch {
			select {
			case it := <-b.queue:
				items = append(items, it)
			default:
				break gather
			}
		}
		docs = docs[:0]
		for _, it := range items {
			docs = append(docs, it.doc)
		}
		errs := b.write(b.life, docs)
		for i, it := range items {
			it.done <- errs[i]
		}
		clear(docs) // the documents are the callers' to let go of
	}
}

// put hands doc to the writer and waits for its batch's outcome. A caller that gives up (ctx)
// leaves its document to be stored or not.
func (b *batcher[T]) put(ctx context.Context, doc T) error {
	// Checked first: a select with several cases ready picks any, and a caller that gave up, or
	// a closed database, must not have its document queued.
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.life.Err() != nil {
		return errWriterStopped
	}
	it := &batchItem[T]{doc: doc, done: make(chan error, 1)}
	select {
	case b.queue <- it:
	case <-b.life.Done():
		return errWriterStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-it.done:
		return err
	case <-b.done:
		select { // the writer may have answered just before it returned
		case err := <-it.done:
			return err
		default:
			return errWriterStopped
		}
	case <-ctx.Done():
		return ctx.Err()
	}
}

// insertEach inserts docs into coll with one unordered command, bounded by batchWriteTimeout,
// and returns each document's error: one refused (a duplicate key) does not keep the others
// out.
func insertEach[T any](ctx context.Context, coll *mongo.Collection, docs []T) []error {
	errs := make([]error, len(docs))
	ctx, cancel := context.WithTimeout(ctx, batchWriteTimeout)
	_, err := coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	cancel()
	var bulk mongo.BulkWriteException
	switch {
	case err == nil:
	case !errors.As(err, &bulk) || bulk.WriteConcernError != nil || len(bulk.WriteErrors) == 0:
		for i := range errs {
			errs[i] = err
		}
	default:
		for _, we := range bulk.WriteErrors {
			if we.Index >= 0 && we.Index < len(errs) {
				errs[we.Index] = we
			}
		}
	}
	return errs
}
