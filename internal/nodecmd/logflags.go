package nodecmd

import (
	goflag "flag"

	"github.com/spf13/pflag"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// LogFlags are controller-runtime's logging flags (--zap-devel,
// --zap-encoder, --zap-log-level, --zap-stacktrace-level,
// --zap-time-encoding), bound by zap.Options itself. Without --zap-devel
// the logs are JSON at level info, for a cluster's log collector.
type LogFlags struct{ opts zap.Options }

// Add registers the flags on fl.
func (l *LogFlags) Add(fl *pflag.FlagSet) {
	gfs := goflag.NewFlagSet("zap", goflag.ContinueOnError)
	l.opts.BindFlags(gfs)
	fl.AddGoFlagSet(gfs)
}

// SetLogger makes the flags' logger controller-runtime's.
func (l *LogFlags) SetLogger() {
	log.SetLogger(zap.New(zap.UseFlagOptions(&l.opts)))
}
