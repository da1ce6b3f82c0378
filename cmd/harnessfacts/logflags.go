package main

import (
	goflag "flag"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// logFlags are controller-runtime's logging flags (--zap-devel,
// --zap-encoder, --zap-log-level, --zap-stacktrace-level,
// --zap-time-encoding), bound by zap.Options itself. Without --zap-devel
// the logs are JSON at level info, for a cluster's log collector.
type logFlags struct{ opts zap.Options }

func (l *logFlags) add(fl *pflag.FlagSet) {
	gfs := goflag.NewFlagSet("zap", goflag.ContinueOnError)
	l.opts.BindFlags(gfs)
	fl.AddGoFlagSet(gfs)
}

// setLogger makes the flags' logger controller-runtime's.
func (l *logFlags) setLogger() {
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&l.opts)))
}
