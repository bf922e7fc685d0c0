"""What happens to runs, seen from outside: logs, Prometheus metrics and OpenTelemetry traces.

The pipeline never imports this package: it tells watchers of each run through `pipeline/observe.py`.
"""
