import java.util.*;
import org.apache.kafka.common.config.ConfigDef;

/** Prints the Java client's and the broker's configuration keys, as their own ConfigDefs name them:
 *  the producer's, the consumer's, a topic's and a broker's; and for the producer's and consumer's
 *  keys, how the client parses a value: its type, and its validator's class and words (a range or
 *  the strings it takes). Run by local/known_keys/generate. */
public class KafkaKeys {
  static String quoted(String s) {
    return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
  }

  static String list(Collection<String> keys) {
    List<String> sorted = new ArrayList<>(keys);
    Collections.sort(sorted);
    StringJoiner out = new StringJoiner(", ", "[", "]");
    for (String k : sorted) out.add(quoted(k));
    return out.toString();
  }

  static String types(ConfigDef def) {
    StringJoiner out = new StringJoiner(", ", "{", "}");
    for (ConfigDef.ConfigKey key : new TreeMap<>(def.configKeys()).values()) {
      String validator = key.validator == null ? "" : key.validator.getClass().getSimpleName();
      String words = key.validator == null ? "" : key.validator.toString();
      out.add(quoted(key.name) + ": [" + quoted(key.type.name()) + ", " + quoted(validator) + ", " + quoted(words) + "]");
    }
    return out.toString();
  }

  public static void main(String[] args) {
    System.out.println("{\"producer\": " + list(org.apache.kafka.clients.producer.ProducerConfig.configNames())
        + ", \"consumer\": " + list(org.apache.kafka.clients.consumer.ConsumerConfig.configNames())
        + ", \"topic\": " + list(org.apache.kafka.storage.internals.log.LogConfig.configNames())
        + ", \"broker\": " + list(kafka.server.KafkaConfig$.MODULE$.configDef().names())
        + ", \"producer_types\": " + types(org.apache.kafka.clients.producer.ProducerConfig.configDef())
        + ", \"consumer_types\": " + types(org.apache.kafka.clients.consumer.ConsumerConfig.configDef()) + "}");
  }
}
