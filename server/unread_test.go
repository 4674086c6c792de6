package server_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
	"google.golang.org/protobuf/proto"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/server/middleware"
)

// lookup opens stream id as a whole Lookup of key: metadata, message and
// the end of the stream.
func (r *rawConn) lookup(id uint32, key string) bool {
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, hf := range []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/idem.v1.IdempotencyService/Lookup"}, {Name: ":authority", Value: "idem"},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
	} {
		_ = enc.WriteField(hf)
	}
	msg, _ := proto.Marshal(&idemv1.LookupRequest{Namespace: ns, Key: key})
	frame := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	r.wmu.Lock()
	defer r.wmu.Unlock()
	return r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndHeaders: true}) == nil &&
		r.fr.WriteData(id, true, append(frame, msg...)) == nil
}

// answered counts the calls the server has answered: their status is
// written, or queued behind answers the client has not read.
type answered struct{ n atomic.Int64 }

func (a *answered) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (a *answered) HandleRPC(_ context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.End); ok {
		a.n.Add(1)
	}
}
func (a *answered) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (a *answered) HandleConn(context.Context, stats.ConnStats)                       {}

// TestUnreadAnswersHoldTheirOwnSize: a client that sends as many Lookups of
// a 60 KiB record as one connection may have in flight and reads none of
// the answers (it grants no flow-control window past HTTP/2's first 64
// KiB) makes the server hold those answers, and no more: grpc-go's own
// codec put each in a pooled buffer of 1 MiB, sixteen times its size. Then
// a client that answers no keepalive ping is cut off, and the server lets
// go of them. Not parallel: it measures the heap of the whole test process.
func TestUnreadAnswersHoldTheirOwnSize(t *testing.T) {
	var calls answered
	limits := middleware.ConnLimits{KeepaliveTime: time.Second, KeepaliveTimeout: time.Second}
	ts := testserver.StartWith(t, testserver.Options{
		Config:        server.Config{ConnLimits: limits},
		ServerOptions: []grpc.ServerOption{grpc.StatsHandler(&calls)},
	})
	const size = 60 << 10
	rec := mustAcquire(t, ts.Client, &idemv1.ClaimRequest{Namespace: ns, Key: "large"})
	if _, err := ts.Client.Complete(testContext(t), &idemv1.CompleteRequest{Namespace: ns, Key: "large", Token: rec.GetToken(), Result: bytes.Repeat([]byte("r"), size)}); err != nil {
		t.Fatal(err)
	}
	streams := int(middleware.DefaultConnLimits().MaxConcurrentStreams)
	before := liveHeap()
	start := calls.n.Load()

	r := dialRaw(t, ts.Addr)
	for i := range streams {
		if !r.lookup(uint32(2*i+1), "large") {
			t.Fatalf("the server closed the connection after %d Lookups", i)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for calls.n.Load()-start < int64(streams) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d Lookups answered after 60s", calls.n.Load()-start, streams)
		}
		time.Sleep(10 * time.Millisecond)
	}
	held := liveHeap()
	unread := uint64(streams * size)
	t.Logf("live heap %d KiB before, %d KiB with %d KiB of answers unread", before>>10, held>>10, unread>>10)
	// Generous: twice what the answers are, far below the 1 MiB each that
	// grpc-go's pooled buffers held.
	if held > before && held-before > 2*unread {
		t.Fatalf("live heap grew by %d KiB for %d unread answers of %d KiB; want under %d KiB",
			(held-before)>>10, streams, size>>10, 2*unread>>10)
	}

	select {
	case <-r.closed:
	case <-time.After(60 * time.Second):
		t.Fatal("a client that answers no ping still holds its connection 60s after a keepalive time of 1s")
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		after := liveHeap()
		if after <= before || after-before < unread/4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("live heap still %d KiB above where it was, 60s after the connection closed", (after-before)>>10)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
