// Package redismove moves Bloom filters from one server that speaks the Redis protocol to
// another, with RedisBloom's own commands: SCAN for the keys of RedisBloom's Bloom filter type,
// then, for each, BF.SCANDUMP from the source and BF.LOADCHUNK into the destination, chunk by
// chunk. It serves `bloomery move-from-redis`, from a Redis with RedisBloom (or a Bloomery) into
// a Bloomery cluster's RESP port.
package redismove

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
)

// BloomType is the type RedisBloom's Bloom filters answer to TYPE, which SCAN's TYPE selects.
const BloomType = "MBbloom--"

// Options say what to move.
type Options struct {
	// Match is SCAN's pattern of the keys to move; empty is every key.
	Match string
	// Replace deletes a filter of the same name at the destination before loading it; without
	// it such a filter is skipped and reported.
	Replace bool
	// Log hears of each filter moved; nil logs nothing.
	Log *slog.Logger
}

// Report counts what a move did.
type Report struct {
	Moved   int
	Skipped []string // filters the destination held already
	Chunks  int
	Bytes   int64
}

// ErrExists is a filter the destination holds already.
var ErrExists = errors.New("the destination holds a filter of that name")

// Move moves every Bloom filter of from whose key Match selects into to, one after the other. A
// filter written at the source while it is dumped may not load (its dump then spans layers its
// header does not describe): stop the writers first. It stops at the first failure other than
// a filter that exists at the destination.
func Move(ctx context.Context, from, to *redis.Client, opts Options) (Report, error) {
	var rep Report
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var cursor uint64
	for {
		keys, next, err := from.ScanType(ctx, cursor, cmp.Or(opts.Match, "*"), 100, BloomType).Result()
		if err != nil {
			return rep, fmt.Errorf("SCAN at the source: %w", err)
		}
		for _, key := range keys {
			chunks, bytes, err := MoveOne(ctx, from, to, key, opts.Replace)
			if errors.Is(err, ErrExists) {
				log.Warn("Filter skipped: the destination holds one of that name", "filter", key)
				rep.Skipped = append(rep.Skipped, key)
				continue
			}
			if err != nil {
				return rep, err
			}
			rep.Moved++
			rep.Chunks += chunks
			rep.Bytes += bytes
			log.Info("Filter moved", "filter", key, "chunks", chunks, "bytes", bytes)
		}
		if cursor = next; cursor == 0 {
			return rep, nil
		}
	}
}

// MoveOne moves the filter key, answering the chunks and bytes it loaded.
func MoveOne(ctx context.Context, from, to *redis.Client, key string, replace bool) (chunks int, bytes int64, err error) {
	n, err := to.Exists(ctx, key).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("%s: EXISTS at the destination: %w", key, err)
	}
	if n > 0 {
		if !replace {
			return 0, 0, fmt.Errorf("%s: %w", key, ErrExists)
		}
		if err := to.Del(ctx, key).Err(); err != nil {
			return 0, 0, fmt.Errorf("%s: DEL at the destination: %w", key, err)
		}
	}
	for iter := int64(0); ; {
		res, err := from.BFScanDump(ctx, key, iter).Result()
		if err != nil {
			return chunks, bytes, fmt.Errorf("%s: BF.SCANDUMP %d at the source: %w", key, iter, err)
		}
		if res.Iter == 0 {
			return chunks, bytes, nil
		}
		if err := to.BFLoadChunk(ctx, key, res.Iter, res.Data).Err(); err != nil {
			return chunks, bytes, fmt.Errorf("%s: BF.LOADCHUNK %d at the destination: %w", key, res.Iter, err)
		}
		chunks++
		bytes += int64(len(res.Data))
		iter = res.Iter
	}
}
