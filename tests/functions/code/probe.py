"""Reports what the Context shows, as JSON, and exercises its side effects."""

import json

from pulsar import Function


class Probe(Function):
    def process(self, input, context):
        context.record_metric("seen", 2)
        context.get_logger().info("probe saw %s", input)
        print(f"probe printed {input}")
        context.put_state("last", input)
        context.publish(context.get_user_config_value("side_topic"), f"side:{input}",
                        properties={"from": "probe"}, message_conf={"partition_key": "side-key"})
        context.publish(context.get_user_config_value("side_topic"), f"conf:{input}",  # the SDK examples' way
                        message_conf={"properties": {"via": "conf"}, "event_timestamp": 42})
        return json.dumps({
            "input": input, "key": context.get_message_key(), "partition_key": context.get_partition_key(),
            "properties": context.get_message_properties(), "topic": context.get_current_message_topic_name(),
            "eventtime": context.get_message_eventtime(), "tenant": context.get_function_tenant(),
            "namespace": context.get_function_namespace(), "name": context.get_function_name(),
            "instance": context.get_instance_id(), "function_id": context.get_function_id(),
            "version": context.get_function_version(), "user_config": context.get_user_config_map(),
            "greeting": context.get_user_config_value("greeting"), "secret": context.get_secret("password"),
            "missing_secret": context.get_secret("nope"), "inputs": context.get_input_topics(),
            "output": context.get_output_topic(), "state": context.get_state("last").decode(),
            "message_id": str(context.get_message_id()),
        })
