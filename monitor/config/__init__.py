"""The operator's configuration (invmon.yaml): its models and how it is read.

values.py checks single fields, sections.py holds one model per section, model.py the whole
`Config`, loading.py reads the file and resolves `${...}` references. Everything a caller
needs is importable from `monitor.config`.
"""

from monitor.config.loading import (
    DEFAULT_CONFIG,
    MAX_CONFIG_BYTES,
    MAX_SECRET_BYTES,
    SECRET_URLS,
    UNSET,
    interpolate,
    load_config,
    parse_config,
)
from monitor.config.model import (
    Config,
)
from monitor.config.sections import (
    DaemonConfig,
    DatabaseConfig,
    FenceConfig,
    HttpConfig,
    LimitsConfig,
    LogConfig,
    RedactConfig,
    RoutesConfig,
    SlackConfig,
    StateConfig,
    Target,
    TargetConfig,
    WatchdogConfig,
)
from monitor.config.values import (
    ACK_MODES,
    MIN_PAGE_TOKEN,
    AckMode,
    ConfigError,
    Model,
    as_duration,
    check_dsn,
    check_url,
    checked_temp_file_limit,
    is_loopback,
    parse_listen,
    safe_to_show,
    unset_message,
)

__all__ = [
    "ACK_MODES",
    "DEFAULT_CONFIG",
    "MAX_CONFIG_BYTES",
    "MAX_SECRET_BYTES",
    "MIN_PAGE_TOKEN",
    "SECRET_URLS",
    "UNSET",
    "AckMode",
    "Config",
    "ConfigError",
    "DaemonConfig",
    "DatabaseConfig",
    "FenceConfig",
    "HttpConfig",
    "LimitsConfig",
    "LogConfig",
    "Model",
    "RedactConfig",
    "RoutesConfig",
    "SlackConfig",
    "StateConfig",
    "Target",
    "TargetConfig",
    "WatchdogConfig",
    "as_duration",
    "check_dsn",
    "check_url",
    "checked_temp_file_limit",
    "interpolate",
    "is_loopback",
    "load_config",
    "parse_config",
    "parse_listen",
    "safe_to_show",
    "unset_message",
]
