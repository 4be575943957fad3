"""The process around the watch folder: signals, sd_notify, reload, status file, metrics and logging."""
