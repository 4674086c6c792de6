package server

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// pooledMessageBytes is the largest message protoCodec marshals into a
// buffer of grpc-go's pool: the pool's tier below 1 MiB.
const pooledMessageBytes = 32 << 10

// protoCodec is grpc-go's protobuf codec except where it puts a large
// message. grpc-go marshals a message into a buffer of its pool whose
// sizes jump from 32 KiB to 1 MiB, so each answer of 60 KiB that waits for
// a client to read it holds 1 MiB, and a connection with its calls' answers
// unread held a hundred times that. Past pooledMessageBytes this codec
// marshals into a buffer of the message's own size, so what an unread
// answer holds is what it is.
type protoCodec struct {
	encoding.CodecV2 // grpc-go's, for Unmarshal and Name
}

func newProtoCodec() protoCodec {
	return protoCodec{CodecV2: encoding.GetCodecV2(grpcproto.Name)}
}

func (c protoCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return c.CodecV2.Marshal(v)
	}
	size := proto.Size(m)
	// The size is the one just computed: UseCachedSize spares a second walk.
	opts := proto.MarshalOptions{UseCachedSize: true}
	if mem.IsBelowBufferPoolingThreshold(size) || size > pooledMessageBytes {
		buf, err := opts.MarshalAppend(make([]byte, 0, size), m)
		if err != nil {
			return nil, fmt.Errorf("proto: %w", err)
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if _, err := opts.MarshalAppend((*buf)[:0], m); err != nil {
		pool.Put(buf)
		return nil, fmt.Errorf("proto: %w", err)
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}
