#!/usr/bin/env python3
"""Renders the Helm chart (helm/mcp-gateway) without the `helm` binary, as
`helm template` would: the manifests as YAML documents on stdout.

    target/deploy-venv/bin/python deploy/checks/render.py [my-values.yaml] [--name gw] [--namespace tools]

The values are checked against values.schema.json first; an error goes to
stderr with exit status 1. Uses helm-python-sdk (deploy/checks/requirements.txt).
"""
import argparse
import pathlib
import sys

import helm_python as helm
import yaml

CHART = pathlib.Path(__file__).resolve().parents[2] / "helm" / "mcp-gateway"


def main():
    ap = argparse.ArgumentParser(description="Render helm/mcp-gateway without the helm binary.")
    ap.add_argument("values", nargs="?", help="a values file (default: the chart's own values.yaml)")
    ap.add_argument("--name", default="gw", help="the release name (default: gw)")
    ap.add_argument("--namespace", default="tools", help="the release namespace (default: tools)")
    args = ap.parse_args()
    values = yaml.safe_load(pathlib.Path(args.values).read_text()) if args.values else None
    with helm.Chart.load(str(CHART)) as chart:
        try:
            chart.validate_schema(values)
            rendered = chart.render(values, name=args.name, namespace=args.namespace, is_install=True)
        except helm.HelmError as e:
            sys.exit(f"render.py: {e}")
    for path, text in sorted(rendered.items()):
        # NOTES.txt is the text `helm install` prints, not a manifest.
        if path.endswith("NOTES.txt") or not text.strip():
            continue
        print(f"---\n# Source: {path}\n{text.strip()}")


main()
