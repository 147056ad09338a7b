// The e2e harness's NetworkPolicy enforcer: kube-network-policies' controller run as a host
// process next to the kubelet. Upstream's main reads only the in-cluster service-account
// config; the harness gives each component a kubeconfig with its own client certificate,
// so this main takes --kubeconfig and otherwise passes the controller's own settings.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/kube-network-policies/pkg/networkpolicy"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig with this component's identity")
	nodeName := flag.String("hostname-override", "", "the Node this process enforces policies for")
	queueID := flag.Int("nfqueue-id", 100, "the nfqueue the policy decisions go through")
	failOpen := flag.Bool("fail-open", false, "accept queued packets while this process is not running")
	dnsFix := flag.Bool("netfilter-bug-1766-fix", false, "queue DNS on PREROUTING (only kernels before 6.12 need it)")
	klog.InitFlags(nil)
	flag.Parse()

	// SIGTERM too (upstream stops on SIGINT only): the harness stops components with SIGTERM,
	// and the controller deletes its nftables table on the way out.
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubeconfig %q: %v\n", *kubeconfig, err)
		os.Exit(2)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fmt.Fprintf(os.Stderr, "client: %v\n", err)
		os.Exit(2)
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	controller, err := networkpolicy.NewController(
		client,
		factory.Networking().V1().NetworkPolicies(),
		factory.Core().V1().Namespaces(),
		factory.Core().V1().Pods(),
		nil, nil, nil, nil, // no (Baseline)AdminNetworkPolicy: NetworkPolicy only
		networkpolicy.Config{
			FailOpen:            *failOpen,
			QueueID:             *queueID,
			NodeName:            *nodeName,
			NetfilterBug1766Fix: *dnsFix,
			// NRI stays on although containerd 1.6 has no NRI socket (pod IPs then come from the
			// apiserver alone): v0.8.0 looks an unknown IP up in its NRI plugin even with NRI
			// disabled, and a nil plugin crashes the controller on the first such packet.
			NRIdisabled: false,
		},
	)
	if err != nil {
		fmt.Fprintf(os.Stderr, "controller: %v\n", err)
		os.Exit(1)
	}
	factory.Start(ctx.Done())
	// Returns when ctx ends, after removing the controller's nftables table.
	if err := controller.Run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "controller: %v\n", err)
		os.Exit(1)
	}
}
