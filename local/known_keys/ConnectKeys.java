import java.lang.reflect.Method;
import java.util.*;
import org.apache.kafka.common.config.ConfigDef;

/** Prints Kafka Connect's configuration keys, as its ConfigDefs name them: a source connector's,
 *  a sink connector's and a distributed worker's; and each plugin's named on the command line, as
 *  its own config() says. Run by local/known_keys/generate with the Kafka family's jars and the
 *  plugins' on the class path. */
public class ConnectKeys {
  static String list(Collection<String> keys) {
    List<String> sorted = new ArrayList<>(keys);
    Collections.sort(sorted);
    StringJoiner out = new StringJoiner(", ", "[", "]");
    for (String k : sorted) out.add("\"" + k + "\"");
    return out.toString();
  }

  public static void main(String[] plugins) throws Exception {
    Class<?> crypto = Class.forName("org.apache.kafka.connect.runtime.distributed.Crypto");
    Method worker = Class.forName("org.apache.kafka.connect.runtime.distributed.DistributedConfig")
        .getDeclaredMethod("config", crypto);
    worker.setAccessible(true);
    ConfigDef workerDef = (ConfigDef) worker.invoke(null, crypto.getField("SYSTEM").get(null));
    StringJoiner byPlugin = new StringJoiner(", ", "{", "}");
    for (String name : plugins) {
      Object connector = Class.forName(name).getDeclaredConstructor().newInstance();
      ConfigDef def = (ConfigDef) connector.getClass().getMethod("config").invoke(connector);
      byPlugin.add("\"" + name + "\": " + list(def.names()));
    }
    System.out.println("{\"source\": " + list(org.apache.kafka.connect.runtime.SourceConnectorConfig.configDef().names())
        + ", \"sink\": " + list(org.apache.kafka.connect.runtime.SinkConnectorConfig.configDef().names())
        + ", \"worker\": " + list(workerDef.names()) + ", \"plugins\": " + byPlugin + "}");
  }
}
