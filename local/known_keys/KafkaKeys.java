import java.util.*;

/** Prints the Java client's and the broker's configuration keys, as their own ConfigDefs name them:
 *  the producer's, the consumer's, a topic's and a broker's. Run by local/known_keys/generate. */
public class KafkaKeys {
  static String list(Collection<String> keys) {
    List<String> sorted = new ArrayList<>(keys);
    Collections.sort(sorted);
    StringJoiner out = new StringJoiner(", ", "[", "]");
    for (String k : sorted) out.add("\"" + k + "\"");
    return out.toString();
  }

  public static void main(String[] args) {
    System.out.println("{\"producer\": " + list(org.apache.kafka.clients.producer.ProducerConfig.configNames())
        + ", \"consumer\": " + list(org.apache.kafka.clients.consumer.ConsumerConfig.configNames())
        + ", \"topic\": " + list(org.apache.kafka.storage.internals.log.LogConfig.configNames())
        + ", \"broker\": " + list(kafka.server.KafkaConfig$.MODULE$.configDef().names()) + "}");
  }
}
