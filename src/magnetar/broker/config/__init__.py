"""The broker's configuration: every setting under the key names of Pulsar's broker.conf,
where settings come from (files, the environment, the command line) and the keys of
Pulsar releases that magnetar accepts without implementing.

Layer rule: config/ is data and imports nothing else of the broker; a check that needs a
feature (a plugin that must load, a TLS file that must parse) lives above, in
service.config_checks, which the start-up path runs after the checks here.

ServiceConfiguration and ConfigError are named here as well as in service_configuration,
because plugins (authentication providers) take the configuration and import it from here.
"""

from magnetar.broker.config.service_configuration import ConfigError, ServiceConfiguration

__all__ = ["ConfigError", "ServiceConfiguration"]
