"""The process: options, the descriptor table of controllers, leader election, the ops
(metrics/health) server, logs and signal handling — the kube-controller-manager
analogue. The command line that starts it is `cli`."""
