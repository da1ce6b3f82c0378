package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/harnessfacts/harnessfacts/internal/fakeprovider"
)

type fakeProviderFlags struct {
	listen   string
	script   string
	fixtures string
}

func newFakeProviderCommand() *cobra.Command {
	f := fakeProviderFlags{}
	cmd := &cobra.Command{
		Use:   "fake-provider",
		Short: "Serve a scripted model provider, so real agent CLIs run offline with no credentials",
		Long: `Serve a scripted model provider on --listen. It speaks Anthropic Messages
(/v1/messages), OpenAI Responses (/v1/responses), OpenAI Chat Completions
(/v1/chat/completions) and Gemini (/v1beta/models/M:streamGenerateContent), and
answers each request with the next step of a fixture's provider-script.yaml
(write a file, run a shell command, call an MCP tool, answer), in the calling
CLI's own tool names. A HarnessRun reaches it through spec.agent.providerURL.

  --script FILE      serve one script at http://ADDR
  --fixtures DIR     serve DIR/NAME/provider-script.yaml at http://ADDR/s/NAME,
                     for every fixture folder NAME that has one, and at
                     http://ADDR too, answering each request from the fixture
                     whose prompt (DIR/NAME/fixture.yaml) it carries: the URL
                     a HarnessSuite's agents use for all its fixtures

Every request is logged on stderr, one line each; credentials are never logged.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runFakeProvider(ctrl.SetupSignalHandler(), cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:8089", "address to listen on")
	fl.StringVar(&f.script, "script", "", "a provider-script.yaml served at the root")
	fl.StringVar(&f.fixtures, "fixtures", "", "a folder of fixture folders whose scripts are served under /s/NAME")
	return cmd
}

func runFakeProvider(ctx context.Context, cmd *cobra.Command, f fakeProviderFlags) error {
	opts := fakeprovider.Options{Log: cmd.ErrOrStderr()}
	if f.script == "" && f.fixtures == "" {
		return errors.New("give --script FILE or --fixtures DIR")
	}
	if f.script != "" {
		s, err := fakeprovider.LoadScript(f.script)
		if err != nil {
			return err
		}
		opts.Script = s
	}
	if f.fixtures != "" {
		scripts, err := fakeprovider.LoadFixtureScripts(f.fixtures)
		if err != nil {
			return err
		}
		opts.Scripts = scripts
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: fakeprovider.New(opts), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(cmd.OutOrStdout(), "fake-provider listening on http://%s\n", ln.Addr())
	for name := range opts.Scripts {
		fmt.Fprintf(cmd.OutOrStdout(), "  fixture %s at http://%s/s/%s\n", name, ln.Addr(), name)
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
