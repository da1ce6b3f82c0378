package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/printers"
)

// printFlags are kubectl's printing flags (-o, --template,
// --allow-missing-template-keys, --show-managed-fields), read as kubectl
// reads them and turned into cli-runtime's printers.
//
// They are not cli-runtime's genericclioptions.PrintFlags on purpose: that
// package also holds kubectl's resource builder, which links kustomize, and
// kustomize links Go's plugin package. A binary that links plugin exports
// every symbol and keeps every exported method, which doubled this binary
// (129 MB) and what each of its processes maps at start, the node-agent's
// idle memory included (docs/performance.md). The printers themselves are
// cli-runtime's.
type printFlags struct {
	format            string
	template          string
	allowMissingKeys  bool
	showManagedFields bool
	// formatSet says whether -o was given: --template alone means
	// go-template, as in kubectl.
	formatSet func() bool
	typer     runtime.ObjectTyper
}

// printFormats are the -o values the printers take, as kubectl lists them.
var printFormats = []string{"go-template", "go-template-file", "json", "jsonpath", "jsonpath-as-json", "jsonpath-file", "kyaml", "name", "template", "templatefile", "yaml"}

// addPrintFlags adds kubectl's printing flags to cmd; extra are further -o
// values the command handles itself (get's wide), named in -o's help.
func addPrintFlags(cmd *cobra.Command, extra ...string) *printFlags {
	f := &printFlags{allowMissingKeys: true, typer: schemeTyper{}}
	fs := cmd.Flags()
	fs.StringVarP(&f.format, "output", "o", "", fmt.Sprintf("Output format. One of: (%s).", strings.Join(append(append([]string{}, printFormats...), extra...), ", ")))
	fs.StringVar(&f.template, "template", "", "Template string or path to template file to use when -o=go-template, -o=go-template-file. The template format is golang templates [http://golang.org/pkg/text/template/#pkg-overview].")
	_ = cmd.MarkFlagFilename("template")
	fs.BoolVar(&f.allowMissingKeys, "allow-missing-template-keys", true, "If true, ignore any errors in templates when a field or map key is missing in the template. Only applies to golang and jsonpath output formats.")
	fs.BoolVar(&f.showManagedFields, "show-managed-fields", false, "If true, keep the managedFields when printing objects in JSON or YAML format.")
	f.formatSet = func() bool { return cmd.Flags().Changed("output") }
	return f
}

// outputFormat is -o, or go-template when only --template was given.
func (f *printFlags) outputFormat() string {
	if f.template != "" && !f.formatSet() {
		return "go-template"
	}
	return f.format
}

// printer is the printer the flags ask for, which sets each typed object's
// kind before printing it (a typed object read through a client has none).
func (f *printFlags) printer() (printers.ResourcePrinter, error) {
	format := f.outputFormat()
	lower := strings.ToLower(format)
	var p printers.ResourcePrinter
	switch lower {
	case "json":
		p = &printers.JSONPrinter{}
	case "yaml":
		p = &printers.YAMLPrinter{}
	case "kyaml":
		p = &printers.KYAMLPrinter{}
	case "name":
		p = &printers.NamePrinter{ShortOutput: true}
	}
	if p != nil {
		if lower != "name" && !f.showManagedFields {
			p = &printers.OmitManagedFieldsPrinter{Delegate: p}
		}
		return printers.NewTypeSetter(f.typer).ToPrinter(p), nil
	}
	p, err := f.templatePrinter(format)
	if err != nil {
		return nil, err
	}
	return printers.NewTypeSetter(f.typer).ToPrinter(p), nil
}

// templatePrinter is the jsonpath or go-template printer of format: its
// template is --template if given, else what follows the format's "=".
func (f *printFlags) templatePrinter(format string) (printers.ResourcePrinter, error) {
	kind, tmpl := format, f.template
	if tmpl == "" {
		kind, tmpl, _ = strings.Cut(format, "=")
	}
	switch kind {
	case "jsonpath", "jsonpath-file", "jsonpath-as-json", "go-template", "go-template-file", "template", "templatefile":
	default:
		return nil, fmt.Errorf("unable to match a printer suitable for the output format %q, allowed formats are: %s", format, strings.Join(printFormats, ","))
	}
	if tmpl == "" {
		return nil, errors.New("template format specified but no template given")
	}
	if strings.HasSuffix(kind, "file") {
		data, err := os.ReadFile(tmpl)
		if err != nil {
			return nil, fmt.Errorf("error reading --template %s, %w", tmpl, err)
		}
		tmpl = string(data)
	}
	if strings.HasPrefix(kind, "jsonpath") {
		p, err := printers.NewJSONPathPrinter(tmpl)
		if err != nil {
			return nil, fmt.Errorf("error parsing jsonpath %s, %w", tmpl, err)
		}
		p.AllowMissingKeys(f.allowMissingKeys)
		p.EnableJSONOutput(kind == "jsonpath-as-json")
		return p, nil
	}
	p, err := printers.NewGoTemplatePrinter([]byte(tmpl))
	if err != nil {
		return nil, fmt.Errorf("error parsing template %s, %w", tmpl, err)
	}
	p.AllowMissingKeys(f.allowMissingKeys)
	return p, nil
}

// schemeTyper is the CLI's scheme as a printer's ObjectTyper.
type schemeTyper struct{}

func (schemeTyper) ObjectKinds(o runtime.Object) ([]schema.GroupVersionKind, bool, error) {
	return clusterScheme().ObjectKinds(o)
}

func (schemeTyper) Recognizes(gvk schema.GroupVersionKind) bool {
	return clusterScheme().Recognizes(gvk)
}
