package command

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"
)

// logFlags are the global --log-level and --log-format.
type logFlags struct {
	level, format string
}

func (fl *logFlags) add(root *cobra.Command) {
	root.PersistentFlags().StringVar(&fl.level, "log-level", "error", "log level of the engine, injectors, agent and live twin, on stderr: debug, info, warn or error (the default keeps to what the command does not print itself)")
	root.PersistentFlags().StringVar(&fl.format, "log-format", "text", "log format: text (key=value) or json (one object per line)")
}

// build returns the one logger of a command, writing to w.
func (fl *logFlags) build(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	switch strings.ToLower(fl.level) {
	case "debug":
		level = slog.LevelDebug
	case "info":
		level = slog.LevelInfo
	case "warn", "warning":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		return nil, fmt.Errorf("--log-level: %q is not one of debug, info, warn or error", fl.level)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch fl.format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: %q is not one of text or json", fl.format)
}

type loggerKey struct{}

// WithLogger adds --log-level and --log-format to root and builds the
// logger from them before any command runs, handing it down through the
// command's context.
func WithLogger(root *cobra.Command) {
	var fl logFlags
	fl.add(root)
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		log, err := fl.build(cmd.ErrOrStderr())
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		cmd.SetContext(context.WithValue(ctx, loggerKey{}, log))
		return nil
	}
}

// Logger returns the command's logger; a discarding one before
// PersistentPreRunE has run (in tests that build a command alone).
func Logger(cmd *cobra.Command) *slog.Logger {
	if ctx := cmd.Context(); ctx != nil {
		if l, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok {
			return l
		}
	}
	return slog.New(slog.DiscardHandler)
}
