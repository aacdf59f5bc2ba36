"""Our small client-go: REST client, informer with indexers, rate-limited work queue,
event recorder, leader election and API discovery. Generic — knows nothing about
certificates, and imports nothing from the rest of the project."""
