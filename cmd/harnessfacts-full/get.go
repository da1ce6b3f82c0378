package main

import (
	"fmt"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

func newGetCommand() *cobra.Command {
	var (
		k             *kube
		selector      string
		allNamespaces bool
	)
	var pf *printFlags
	cmd := &cobra.Command{
		Use:   "get [RUN...]",
		Short: "List HarnessRuns (or show some) like kubectl get: -o wide|yaml|json|name|jsonpath",
		Long: `List the HarnessRuns of the namespace, or show the named ones. The table has the
columns of 'kubectl get harnessruns' (the API server prints them from the
CRD); -o wide adds the reason, attempt and evidence digest. -o yaml, json,
name, jsonpath=... and go-template=... print the objects as kubectl does.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := k.client()
			if err != nil {
				return err
			}
			if allNamespaces {
				ns = ""
			}
			out := cmd.OutOrStdout()
			format := pf.outputFormat()
			if format == "" || format == "wide" {
				tp := printers.NewTablePrinter(printers.PrintOptions{Wide: format == "wide", WithNamespace: allNamespaces})
				names := args
				if len(names) == 0 {
					names = []string{""}
				}
				var table *metav1.Table
				for _, name := range names {
					t, err := k.serverTable(cmd.Context(), ns, runsResource, name, selector)
					if err != nil {
						return describeErr(err, ns, name)
					}
					if table == nil {
						table = t
					} else {
						table.Rows = append(table.Rows, t.Rows...)
					}
				}
				if len(table.Rows) == 0 {
					where := "namespace " + ns
					if allNamespaces {
						where = "any namespace"
					}
					cmd.PrintErrf("No HarnessRuns found in %s.\n", where)
					return nil
				}
				return tp.PrintObj(table, out)
			}
			p, err := pf.printer()
			if err != nil {
				return err
			}
			var obj runtime.Object
			if len(args) == 1 {
				run := &harnessv1.HarnessRun{}
				if err := c.Get(cmd.Context(), client.ObjectKey{Namespace: ns, Name: args[0]}, run); err != nil {
					return describeErr(err, ns, args[0])
				}
				obj = run
			} else {
				list := &harnessv1.HarnessRunList{}
				opts := []client.ListOption{client.InNamespace(ns)}
				if selector != "" {
					sel, err := metav1.ParseToLabelSelector(selector)
					if err != nil {
						return fmt.Errorf("-l %q: %w", selector, err)
					}
					s, err := metav1.LabelSelectorAsSelector(sel)
					if err != nil {
						return fmt.Errorf("-l %q: %w", selector, err)
					}
					opts = append(opts, client.MatchingLabelsSelector{Selector: s})
				}
				if err := c.List(cmd.Context(), list, opts...); err != nil {
					return err
				}
				if len(args) > 0 {
					want := map[string]bool{}
					for _, a := range args {
						want[a] = true
					}
					items := list.Items[:0]
					for _, r := range list.Items {
						if want[r.Name] {
							items = append(items, r)
						}
					}
					list.Items = items
				}
				if format == "name" {
					for i := range list.Items {
						if err := p.PrintObj(&list.Items[i], out); err != nil {
							return err
						}
					}
					return nil
				}
				obj = list
			}
			return p.PrintObj(obj, out)
		},
	}
	k = newKube(cmd)
	pf = addPrintFlags(cmd, "wide")
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "label selector, e.g. harnessfacts.io/suite=nightly")
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "list the runs of every namespace")
	return cmd
}

// describeErr says which run was not found in which namespace.
func describeErr(err error, ns, name string) error {
	if name == "" {
		return fmt.Errorf("listing HarnessRuns in namespace %s: %w", ns, err)
	}
	return fmt.Errorf("HarnessRun %s/%s: %w", ns, name, err)
}
