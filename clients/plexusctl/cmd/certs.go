package cmd

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/plexusnet/plexus/internal/certgen"
)

// certsCmd issues a local CA and the certificates of a deployment.
func certsCmd() *cobra.Command {
	var (
		opts   = certgen.Options{Dir: ".certs"}
		sans   []string
		member certgen.MemberOptions
	)
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Create a local CA and mutual TLS certificates for the four services and an operator",
		Long: `Create a local CA (ECDSA P-256) and, signed by it, one certificate per
service (allocator, membership, importer, repair; server and client) and one
client certificate for an operator using plexusctl.

Each certificate names its holder by the SPIFFE ID spiffe://` + certgen.TrustDomain + `/<name>,
the principal the authorization policies in deploy/policy allow. A service
certificate is valid for localhost, 127.0.0.1, ::1, the service's name and its
Kubernetes Service names in --namespace; --san adds names, to every service
or, as SERVICE=NAME, to one.

Layout: DIR/ca.crt and DIR/ca.key (keep the key away from the services), and
DIR/<name>/{tls.crt,tls.key,ca.crt}, one folder per Kubernetes Secret:

  kubectl -n plexus-system create secret generic plexus-allocator-tls --from-file=DIR/allocator

Existing files are never replaced unless --force is given; then every
certificate and the CA are new.

Per-cluster identities: with --clusterset and --cluster, the command issues
the membership, importer and repair certificates of one member cluster,
named spiffe://` + certgen.TrustDomain + `/clusterset/<clusterset>/cluster/<cluster>/<service>
(the subject's OU says the clusterset and cluster too), into
DIR/<cluster>/<service>/. With --clusterset and --fleet it issues the fleet
identities, spiffe://` + certgen.TrustDomain + `/clusterset/<clusterset>/fleet/<service>, of a
repair that may release any cluster's leaks and of an operator, into
DIR/fleet/<service>/. Both sign with the CA in DIR (created when DIR has
none) and --force replaces only those certificates. The allocator keeps its
fleet-wide certificate.`,
		Example: `  plexusctl certs --dir .certs
  plexusctl certs --dir .certs --san membership=plexus-membership.cluster-a.example.net
  plexusctl certs --dir .certs --clusterset east --cluster cluster-a
  plexusctl certs --dir .certs --clusterset east --fleet
  plexusctl pool list --tls-ca .certs/ca.crt --tls-cert .certs/fleet/operator/tls.crt --tls-key .certs/fleet/operator/tls.key`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, v := range sans {
				san, err := certgen.ParseSAN(v)
				if err != nil {
					return fmt.Errorf("--san: %w", err)
				}
				opts.SANs = append(opts.SANs, san)
			}
			if member.Clusterset != "" || member.Cluster != "" || member.Fleet {
				return memberCerts(cmd, opts, member)
			}
			return sharedCerts(cmd, opts)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&opts.Dir, "dir", opts.Dir, "folder to write the CA and certificates into (created when missing)")
	fs.DurationVar(&opts.Validity, "validity", certgen.DefaultValidity, "how long the service and operator certificates are valid")
	fs.DurationVar(&opts.CAValidity, "ca-validity", certgen.DefaultCAValidity, "how long the CA is valid; at least --validity")
	fs.StringVar(&opts.Namespace, "namespace", certgen.DefaultNamespace, "Kubernetes namespace of the services' DNS names (plexus-<service>.<namespace>.svc)")
	fs.StringArrayVar(&sans, "san", nil, "extra DNS name or IP address of the service certificates, as NAME (every service) or SERVICE=NAME; repeatable")
	fs.BoolVar(&opts.Force, "force", false, "replace existing files (a new CA and new certificates; with --cluster or --fleet, those certificates only)")
	fs.StringVar(&member.Clusterset, "clusterset", "", "issue per-cluster identities of this clusterset (with --cluster or --fleet)")
	fs.StringVar(&member.Cluster, "cluster", "", "member cluster whose membership, importer and repair certificates to issue")
	fs.BoolVar(&member.Fleet, "fleet", false, "issue the clusterset's fleet identities (repair with fleet rights, operator)")
	return cmd
}

// sharedCerts issues the CA, the allocator's certificate, the services'
// shared ones and the operator's, and prints the Secrets to make.
func sharedCerts(cmd *cobra.Command, opts certgen.Options) error {
	written, err := certgen.Generate(opts)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	for _, f := range written {
		fmt.Fprintln(out, f)
	}
	fmt.Fprintf(out, "\nKubernetes Secrets (the Deployments in deploy/ mount plexus-<service>-tls):\n")
	for _, svc := range certgen.Services {
		fmt.Fprintf(out, "  kubectl -n %s create secret generic plexus-%s-tls --from-file=%s\n",
			opts.Namespace, svc, filepath.Dir(certgen.For(opts.Dir, svc).Cert))
	}
	return nil
}

// memberCerts issues one member cluster's certificates or the fleet's.
func memberCerts(cmd *cobra.Command, opts certgen.Options, member certgen.MemberOptions) error {
	if member.Clusterset == "" || (member.Cluster == "") == !member.Fleet {
		return fmt.Errorf("per-cluster certificates need --clusterset and one of --cluster or --fleet")
	}
	if cmd.Flags().Changed("ca-validity") {
		return fmt.Errorf("--ca-validity: the CA in --dir is reused")
	}
	member.Dir, member.Validity, member.Namespace, member.SANs, member.Force = opts.Dir, opts.Validity, opts.Namespace, opts.SANs, opts.Force
	written, err := certgen.GenerateMember(member)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	for _, f := range written {
		fmt.Fprintln(out, f)
	}
	services, where := certgen.MemberServices, "in cluster "+member.Cluster
	if member.Fleet {
		services, where = certgen.FleetServices, "where the fleet's repair or operator runs"
	}
	fmt.Fprintf(out, "\nKubernetes Secrets (%s):\n", where)
	for _, svc := range services {
		fmt.Fprintf(out, "  kubectl -n %s create secret generic plexus-%s-tls --from-file=%s\n",
			member.Namespace, svc, filepath.Dir(certgen.MemberFor(member.Dir, member.Cluster, svc).Cert))
	}
	return nil
}
