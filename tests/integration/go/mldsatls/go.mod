module mldsatls

go 1.27
