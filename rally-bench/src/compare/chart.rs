//! The chart of the medians per row and framework (feature `plots`).

use super::*;

/// Without the `plots` feature (left out of the default build to keep the main job's cold
/// build short) there is no chart; the table and JSON are the same.
#[cfg(not(feature = "plots"))]
pub(super) fn draw_chart(_table: &Comparison, _scenario: &str, _path: &Path) -> anyhow::Result<()> {
    bail!("rally-bench was built without the `plots` feature (add `--features plots`)")
}

#[cfg(feature = "plots")]
pub(super) fn draw_chart(table: &Comparison, scenario: &str, path: &Path) -> anyhow::Result<()> {
    use plotters::prelude::*;

    if table.keys.is_empty() {
        bail!("nothing to draw");
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    // x: the client count when every row is one (remote-ping-pong), else the row's position.
    let by_clients: Option<Vec<f64>> = table
        .keys
        .iter()
        .map(|k| k.clients().map(|c| c as f64))
        .collect();
    let xs: Vec<f64> = by_clients
        .clone()
        .unwrap_or_else(|| (0..table.keys.len()).map(|i| i as f64).collect());
    let x_max = xs.iter().copied().fold(0.0, f64::max);
    // Client counts start the axis at 0; row positions get half a slot of margin each side.
    let x_range = if by_clients.is_some() {
        0.0..x_max + 1.0
    } else {
        -0.5..x_max + 0.5
    };
    let y_max = table
        .values
        .iter()
        .filter(|((_, _, metric), _)| *metric == Metric::MsgsPerSec)
        .flat_map(|(_, values)| values)
        .copied()
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.1;
    let labels: Vec<String> = table.keys.iter().map(RowKey::label).collect();

    let root = SVGBackend::new(path, (1000, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{scenario}: msgs/s, median of runs"),
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(x_range, 0.0..y_max)
        .map_err(|e| anyhow!("{e:?}"))?;
    let x_formatter = |x: &f64| -> String {
        if by_clients.is_some() {
            format!("{x:.0}")
        } else {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        }
    };
    let y_formatter = |y: &f64| si(*y);
    chart
        .configure_mesh()
        .x_desc(if by_clients.is_some() {
            "clients"
        } else {
            "row"
        })
        .y_desc("msgs/s")
        .x_labels(if by_clients.is_some() {
            10
        } else {
            table.keys.len() * 2 + 1
        })
        .x_label_formatter(&x_formatter)
        .y_label_formatter(&y_formatter)
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    for (s, name) in table.series.iter().enumerate() {
        let color = Palette99::pick(s).to_rgba();
        let points: Vec<(f64, f64)> = (0..table.keys.len())
            .filter_map(|k| table.summary(k, s).map(|sum| (xs[k], sum.median)))
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(|e| anyhow!("{e:?}"))?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| anyhow!("{e:?}"))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    root.present().map_err(|e| anyhow!("{e:?}"))?;
    Ok(())
}
