"""spark-submit entry point (cluster mode on Kubernetes): the same as `coordinated audit ARGS`.

    spark-submit --master k8s://https://... --deploy-mode cluster \\
        local:///app/spark-jobs/audit_main.py --from-cluster http://... --report-dir /reports
"""

import sys

from coordinated.audit.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
