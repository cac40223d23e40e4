// BullMQ beside purgatorio-redis's `bench`: the same run (`count` timers
// whose deadlines, by Redis's clock, start after a lead and span `spreadMs`),
// as BullMQ delayed jobs (addBulk in batches of 1,000, removed on
// completion) handled by 2 workers of concurrency 50; prints the same lines
// as `purgatorio-redis bench`. Run by redis/bench/compare.sh --bullmq.
//
//   node bullmq.mjs PORT COUNT SPREAD_MS
import { Queue, Worker } from 'bullmq';

const [port, count, spreadMs] = process.argv.slice(2).map(Number);
const connection = { host: '127.0.0.1', port };
const queue = new Queue('cmp', { connection });
const client = await queue.client;
const redisMs = async () => {
  const [s, us] = await client.time();
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
};
// Redis's clock minus this machine's, read once (as the Rust bench does).
const offset = (await redisMs()) - Date.now();
const late = [];
// Each job id delivered, to count the ones delivered more than once.
const seen = new Set();
let duplicated = 0;
const workers = [0, 1].map(() => new Worker('cmp', async (job) => {
  if (seen.has(job.id)) duplicated += 1;
  seen.add(job.id);
  late.push(Date.now() + offset - job.data.at);
}, { connection, concurrency: 50 }));
await Promise.all(workers.map((w) => w.waitUntilReady()));

const leadMs = 2000 + Math.floor(count / 20);
const base = (await redisMs()) + leadMs;
const started = Date.now();
for (let first = 0; first < count; first += 1000) {
  const jobs = [];
  for (let i = first; i < Math.min(first + 1000, count); i++) {
    const at = base + Math.floor((i * spreadMs) / count);
    // BullMQ counts a delay from the adding client's clock.
    const delay = Math.max(0, at - (Date.now() + offset));
    jobs.push({ name: 't', data: { at }, opts: { delay, jobId: `b${i}`, removeOnComplete: true, removeOnFail: true } });
  }
  await queue.addBulk(jobs);
}
const scheduleSecs = (Date.now() - started) / 1000;
const firstDue = Math.max(started + leadMs, Date.now());
const giveUp = Date.now() + spreadMs + 60000;
while (late.length < count && Date.now() < giveUp) {
  await new Promise((r) => setTimeout(r, 10));
}
const deliverSecs = (Date.now() - firstDue) / 1000;
await Promise.all(workers.map((w) => w.close()));
await queue.close();
late.sort((a, b) => a - b);
const at = (q) => late[Math.floor((late.length - 1) * q)] ?? 0;
console.log(`timers                 ${count} over ${spreadMs} ms, BullMQ ${process.env.BULLMQ_VERSION ?? ''}, 2 workers x 50`);
console.log(`schedules/s            ${Math.round(count / scheduleSecs)}`);
console.log(`deliveries/s           ${Math.round(late.length / Math.max(deliverSecs, 0.001))} (${late.length} delivered in ${deliverSecs.toFixed(2)} s)`);
console.log(`lateness p50/p99/max   ${at(0.5)} / ${at(0.99)} / ${at(1)} ms (Redis's clock)`);
console.log(`early, lost, duplicated ${late.filter((l) => l < 0).length}, ${count - seen.size}, ${duplicated}`);
