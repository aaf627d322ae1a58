package redismove

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/bloomery/bloomery/internal/cli"
)

// NewCommand is `bloomery move-from-redis`.
func NewCommand() *cobra.Command {
	var from, to string
	var opts Options
	cmd := &cobra.Command{
		Use:   "move-from-redis --from redis://SOURCE:6379 --to redis://BLOOMERY:6379",
		Short: "Move every Bloom filter of a Redis with RedisBloom into Bloomery, with BF.SCANDUMP and BF.LOADCHUNK",
		Long: `Move every Bloom filter of a Redis server (RedisBloom's type MBbloom--, or those --match
selects) into the server at --to, a Bloomery cluster's RESP port: SCAN at the source, then for each
filter BF.SCANDUMP there and BF.LOADCHUNK at the destination, chunk by chunk. The filters keep
their bits, so every item answers as it did. Stop writing to the source first. A filter that
exists at the destination is skipped unless --replace. Addresses are redis:// or rediss:// URLs,
with the password in them where one is needed (redis://:PASSWORD@host:6379).`,
		Args: cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" || to == "" {
				return cli.NewUsageError(cmd, errors.New("--from and --to are required"))
			}
			src, err := client(from)
			if err != nil {
				return cli.NewUsageError(cmd, fmt.Errorf("--from: %w", err))
			}
			defer func() { _ = src.Close() }()
			dst, err := client(to)
			if err != nil {
				return cli.NewUsageError(cmd, fmt.Errorf("--to: %w", err))
			}
			defer func() { _ = dst.Close() }()
			opts.Log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			rep, err := Move(cmd.Context(), src, dst, opts)
			_, _ = fmt.Fprintf(cmd.OutOrStdout(), "moved %d filters (%d chunks, %d bytes), skipped %d\n", rep.Moved, rep.Chunks, rep.Bytes, len(rep.Skipped))
			return err
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the source, a redis:// URL")
	cmd.Flags().StringVar(&to, "to", "", "the destination, a redis:// URL of Bloomery's RESP port")
	cmd.Flags().StringVar(&opts.Match, "match", "", "SCAN's pattern of the keys to move (default every key)")
	cmd.Flags().BoolVar(&opts.Replace, "replace", false, "delete a filter of the same name at the destination before loading it")
	return cmd
}

func client(url string) (*redis.Client, error) {
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	// RESP2, which every RedisBloom and Bloomery speaks.
	o.Protocol = 2
	return redis.NewClient(o), nil
}
