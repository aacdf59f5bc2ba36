"""The process: CLI, options, wiring of the controllers, leader election, the ops
(metrics/health) server and signal handling — the kube-controller-manager analogue."""
